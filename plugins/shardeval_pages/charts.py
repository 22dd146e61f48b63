"""Vega-Lite specifications of the report's charts, as plain dicts (Vega draws them in the page).

Every chart gets its numbers already aggregated (a few hundred rows at most, whatever the run's
size), so a report of millions of records stays small and opens fast. Intervals come from
scores.json; nothing here computes a statistic.
"""

from __future__ import annotations

from typing import Any

WIDTH = "container"  # the chart's container: the page's width (page.STYLE gives .chart its width)
FACET_WIDTH = 440  # a faceted chart's panel: Vega-Lite sizes only single and layered views by their container
ROW = 16  # pixels per row of a chart with one row per category
# Tick labels as the values they stand at (up to 6 significant digits). Vega's default format
# takes its precision from the tick step, which is 0 when every value is the same (a category
# whose answers were all right, a server with one TTFT): 0.7 alone was labelled "1", 0.1 "0".
VALUE_AXIS = {"format": ".6~g", "tickCount": 10}  # ten ticks at most: a chart as wide as the page had thirty
COUNT_AXIS = {"tickMinStep": 1, "format": "d"}
SHARE_AXIS = {
    "format": ".1%",
    "tickCount": 10,
}  # a share of a whole, as people say it: 13.0%  # a count has no half: 2.5 records is never a tick
POINT_COLOR, INTERVAL_COLOR = "#1f5a96", "#9fbbd9"  # a value and, lighter behind it, its interval (one-colour charts)
ERROR_COLOR = "#d1495b"  # an error is this colour in every chart (coverage, errors by kind)
# errors by kind: the most common kind in ERROR_COLOR, the others in reds around it
ERROR_KIND_COLORS = [ERROR_COLOR, "#8c1c2b", "#f08a97", "#b5343f", "#5e0f19", "#f7bcc3"]


# Every chart's config: no frame, and the pages' own format type (draw.js registers `decimals`, the
# one rounding rule of every output) allowed in its tooltips.
CONFIG = {"view": {"stroke": None}, "customFormatTypes": True}


def _number(digits: int | str) -> dict[str, Any]:
    """A tooltip's number: `digits` decimals by the one rule (draw.js's `decimals`, as fmt), or "d"
    for a count. Vega's ".4f" rounds the binary value: a tooltip said 0.5537 beside a table's 0.5538."""
    return {"format": "d"} if digits == "d" else {"format": str(digits), "formatType": "decimals"}


def _tip(nominal: list[str], numbers: list[str], digits: int | str = 4) -> list[dict[str, Any]]:
    return [
        *({"field": f, "type": "nominal"} for f in nominal),
        *({"field": f, "type": "quantitative", **_number(digits)} for f in numbers),
    ]


def _base(rows: list[dict[str, Any]], title: str, **extra: Any) -> dict[str, Any]:
    return {"title": title, "data": {"values": rows}, "config": CONFIG, **extra}


def forest(
    rows: list[dict[str, Any]], title: str, *, y: str = "benchmark", color: str | None = None, order: list[str] | None = None
) -> dict[str, Any]:
    """One row per `y` (and colour), a point at `value` and a rule over [low, high]: rows {metric,
    <y>, value, low, high[, <color>]}. Rows of one metric are one view as wide as the page, the
    metric named on its axis; of several, one panel per metric with its own x scale. `order` keeps
    the colours in the given order (a sweep's models as listed, step2 before step10; compare's A
    before B); beyond 10 values the default palette would repeat: 20 distinct colours, then a ramp."""
    enc_y = {"field": y, "type": "nominal", "title": None, "sort": None}
    tooltip = _tip(["metric", y, *([color] if color else [])], ["value", "low", "high"])
    shared: dict[str, Any] = {"y": enc_y, "tooltip": tooltip}
    if color:
        scale = (
            {}
            if order is None
            else {"domain": order, **({} if len(order) <= 10 else {"scheme": "tableau20" if len(order) <= 20 else "viridis"})}
        )
        shared["color"] = {"field": color, "type": "nominal", "title": None, **({"scale": scale, "sort": order} if order else {})}
        shared["yOffset"] = {"field": color, **({"sort": order} if order else {})}
    metrics = list(dict.fromkeys(r["metric"] for r in rows))
    plain = {} if color else {"color": INTERVAL_COLOR}  # one colour: the interval lighter than its point
    layer = [
        {
            "mark": {"type": "rule", "strokeWidth": 2, **plain},
            "encoding": {
                **shared,
                "x": {
                    "field": "low",
                    "type": "quantitative",
                    "title": metrics[0] if len(metrics) == 1 else None,
                    "scale": {"zero": False},
                    "axis": VALUE_AXIS,
                },
                "x2": {"field": "high"},
            },
        },
        {
            "mark": {"type": "point", "filled": True, "size": 50, **({} if color else {"color": POINT_COLOR})},
            "encoding": {**shared, "x": {"field": "value", "type": "quantitative"}},
        },
    ]
    if len(metrics) == 1:  # a row of ROW pixels per point: its height is known before it is drawn (page.Page.chart)
        return _base(
            rows, title, width=WIDTH, height=max(ROW * len({(r[y], r.get(color) if color else None) for r in rows}), 40), layer=layer
        )
    return _base(
        rows,
        title,
        facet={
            "row": {
                "field": "metric",
                "type": "nominal",
                "title": None,
                "sort": None,
                "header": {"labelAngle": 0, "labelAlign": "left", "labelFontWeight": "bold"},
            }
        },
        spec={"width": FACET_WIDTH, "layer": layer},
        resolve={"scale": {"x": "independent"}},
    )


def interval_rows(rows: list[dict[str, Any]], title: str, *, y: str, x_title: str, zero_rule: bool = False) -> dict[str, Any]:
    """One row per `y`, sorted as given: a point at value, a rule over [low, high]; rows
    {<y>, value, low, high, n}. `zero_rule` draws x = 0: every chart of differences asks for it."""
    tooltip = _tip([y], ["value", "low", "high"]) + _tip([], ["n"], "d")
    enc = {"y": {"field": y, "type": "nominal", "sort": None, "title": None}, "tooltip": tooltip}
    layers = [
        {
            "mark": {"type": "rule", "strokeWidth": 2, "color": INTERVAL_COLOR},
            "encoding": {
                **enc,
                "x": {"field": "low", "type": "quantitative", "title": x_title, "scale": {"zero": False}, "axis": VALUE_AXIS},
                "x2": {"field": "high"},
            },
        },
        {
            "mark": {"type": "point", "filled": True, "color": POINT_COLOR},
            "encoding": {**enc, "x": {"field": "value", "type": "quantitative"}},
        },
    ]
    if zero_rule:
        layers.append(_zero_rule("x"))
    return _base(rows, title, width=WIDTH, height=max(ROW * len(rows), 40), layer=layers)


def _zero_rule(axis: str) -> dict[str, Any]:
    """A dashed line at 0 on `axis` (x or y), from data of its own: one line, not one per row."""
    return {
        "data": {"values": [{"zero": 0}]},
        "mark": {"type": "rule", "strokeDash": [4, 3], "color": "#888"},
        "encoding": {axis: {"field": "zero", "type": "quantitative"}},
    }


def across_models(
    data: str,
    where: dict[str, str],
    title: str,
    *,
    order: list[str],
    value: str,
    y_title: str,
    zero_rule: bool = False,
    share: bool = False,
) -> dict[str, Any]:
    """One benchmark's `value` for every model of a sweep, left to right in the sweep's order (a
    training run's checkpoints read as a curve): a point, and a rule over [ci_low, ci_high] where
    there is an interval. The rows are the page's dataset `data`, filtered to `where` in the
    chart, so twenty charts of one sweep carry no copy of it. `zero_rule` draws y = 0; `share`
    reads the value as a share of a whole (an axis from 0, ticks in percent)."""
    interval = {f: f"isValid(datum.ci_{f}) ? datum.ci_{f} : datum.{value}" for f in ("low", "high")}
    transform = [
        *({"filter": {"field": f, "equal": v}} for f, v in where.items()),
        {"filter": f"isValid(datum.{value})"},
        *({"calculate": expr, "as": f} for f, expr in interval.items()),
    ]
    x = {
        "field": "service",
        "type": "nominal",
        "sort": order,
        "title": None,
        "axis": {"labelAngle": 0 if len(order) <= 8 else -45, "labelOverlap": True, "labelLimit": 120},
    }
    tooltip = _tip(["service"], [value, "low", "high"]) + _tip([], ["n"], "d")
    rows = {"data": {"name": data}, "transform": transform}
    layers: list[dict[str, Any]] = [
        {
            **rows,
            "mark": {"type": "rule", "strokeWidth": 2, "color": INTERVAL_COLOR},
            "encoding": {
                "x": x,
                "y": {
                    "field": "low",
                    "type": "quantitative",
                    "title": y_title,
                    "scale": {"zero": share},
                    "axis": SHARE_AXIS if share else VALUE_AXIS,
                },
                "y2": {"field": "high"},
                "tooltip": tooltip,
            },
        },
        {
            **rows,
            "mark": {"type": "point", "filled": True, "size": 40, "color": POINT_COLOR, "opacity": 1},
            "encoding": {"x": x, "y": {"field": value, "type": "quantitative"}, "tooltip": tooltip},
        },
    ]
    if zero_rule:
        layers.append(_zero_rule("y"))
    return {"title": title, "data": {"name": data}, "config": CONFIG, "width": WIDTH, "height": 200, "layer": layers}


def pass_at_k(rows: list[dict[str, Any]], title: str) -> dict[str, Any]:
    """pass@k against k of one benchmark, its interval as a band: rows {benchmark, k, value, low, high}."""
    x = {
        "field": "k",
        "type": "quantitative",
        "axis": {"values": sorted({r["k"] for r in rows}), "format": "d"},
    }  # ticks at the k's, never 1.5
    tooltip = _tip(["benchmark"], ["value", "low", "high"]) + _tip([], ["k"], "d")
    return _base(
        rows,
        title,
        width=WIDTH,
        height=220,
        layer=[
            {
                "mark": {"type": "area", "opacity": 0.2},
                "encoding": {"x": x, "y": {"field": "low", "type": "quantitative"}, "y2": {"field": "high"}},
            },
            {
                "mark": {"type": "line", "point": True},
                "encoding": {"x": x, "y": {"field": "value", "type": "quantitative", "title": "pass@k"}, "tooltip": tooltip},
            },
        ],
    )


def ecdf(rows: list[dict[str, Any]], title: str, x_title: str) -> dict[str, Any]:
    """One benchmark's distribution as its empirical CDF from percentiles: rows {benchmark, q,
    seconds}; the tail shows as the curve's last stretch."""
    return _base(
        rows,
        title,
        width=WIDTH,
        height=200,
        mark={"type": "line", "interpolate": "step-after", "point": False},
        encoding={
            "x": {"field": "seconds", "type": "quantitative", "title": x_title, "axis": VALUE_AXIS},
            "y": {"field": "q", "type": "quantitative", "title": "fraction of requests", "scale": {"domain": [0, 1]}},
            "tooltip": _tip(["benchmark"], ["q", "seconds"], 3),
        },
    )


def stacked_counts(rows: list[dict[str, Any]], title: str, *, y: str, color: str, colors: dict[str, str] | None = None) -> dict[str, Any]:
    """Counts per `y`, stacked by `color`: rows {<y>, <color>, n} (coverage per shard, errors by
    shard and kind); `colors` fixes each value's colour, in that order. The count axis ticks at
    whole numbers."""
    scale: dict[str, Any] = {"domain": list(colors), "range": list(colors.values())} if colors else {}
    return _base(
        rows,
        title,
        width=WIDTH,
        height=max(ROW * len({r[y] for r in rows}), 40),
        mark="bar",
        encoding={
            "y": {"field": y, "type": "nominal", "sort": None, "title": None},
            "x": {"field": "n", "type": "quantitative", "title": "records", "stack": True, "axis": COUNT_AXIS},
            "color": {"field": color, "type": "nominal", "scale": scale, "title": None},
            "tooltip": _tip([y, color], ["n"], "d"),
        },
    )


def error_kind_colors(kinds: list[str]) -> dict[str, str]:
    """Each error kind's colour, most common first: all reds, the first ERROR_COLOR itself."""
    return {k: ERROR_KIND_COLORS[i % len(ERROR_KIND_COLORS)] for i, k in enumerate(kinds)}


# a reasoning benchmark's replies by outcome: answered as the interval blue, cut off after its
# answer began lighter, cut off while thinking in the error red (it scores 0, like an error counts)
OUTCOME_COLORS = {"answered": POINT_COLOR, "cut off after answering": "#e0a458", "truncated while thinking": ERROR_COLOR}


def histogram(rows: list[dict[str, Any]], title: str, *, x_title: str, colors: dict[str, str]) -> dict[str, Any]:
    """Counts over [lo, hi) bins, stacked by `outcome`: rows {lo, hi, outcome, n} (binned by the
    page: a run of any size gives at most a few dozen rows). The count axis ticks at whole numbers."""
    return _base(
        rows,
        title,
        width=WIDTH,
        height=180,
        mark={"type": "bar", "binSpacing": 1},
        encoding={
            "x": {"field": "lo", "type": "quantitative", "title": x_title, "bin": {"binned": True}, "axis": VALUE_AXIS},
            "x2": {"field": "hi"},
            "y": {"field": "n", "type": "quantitative", "title": "replies", "stack": True, "axis": COUNT_AXIS},
            "color": {
                "field": "outcome",
                "type": "nominal",
                "title": None,
                "scale": {"domain": list(colors), "range": list(colors.values())},
            },
            "tooltip": _tip(["outcome"], ["lo", "hi", "n"], "d"),
        },
    )


def series_across_models(
    data: str, where: dict[str, str], title: str, *, order: list[str], values: list[str], y_title: str
) -> dict[str, Any]:
    """Several numbers of one benchmark for every model of a sweep (each a line with points, in
    the sweep's order, one colour each): the page's dataset `data` filtered to `where`, its
    fields `values` folded into (stat, value) in the chart."""
    x = {
        "field": "service",
        "type": "nominal",
        "sort": order,
        "title": None,
        "axis": {"labelAngle": 0 if len(order) <= 8 else -45, "labelOverlap": True, "labelLimit": 120},
    }
    transform = [
        *({"filter": {"field": f, "equal": v}} for f, v in where.items()),
        {"fold": values, "as": ["stat", "value"]},
        {"filter": "isValid(datum.value)"},
    ]
    return {
        "title": title,
        "data": {"name": data},
        "transform": transform,
        "config": CONFIG,
        "width": WIDTH,
        "height": 200,
        "mark": {"type": "line", "point": {"filled": True, "size": 40}},
        "encoding": {
            "x": x,
            "y": {"field": "value", "type": "quantitative", "title": y_title, "axis": VALUE_AXIS},
            "color": {"field": "stat", "type": "nominal", "title": None, "sort": values},
            "tooltip": _tip(["service", "stat"], ["value"], 1),
        },
    }
