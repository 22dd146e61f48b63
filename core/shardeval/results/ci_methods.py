"""The names `merge --ci-method` accepts (here, not in shardeval.results.metrics, so `--help` stays light).

How a mean's interval is built (docs/merge.md, "Intervals"): "auto" picks per metric, Wilson at
the effective sample size for proportions (Clopper-Pearson where few successes or failures remain),
the normal interval (clustered when clustered) for other means; the others force one method.
"""

CI_METHODS = ("auto", "wilson", "clopper-pearson", "clt", "clustered")
