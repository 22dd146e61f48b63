// Four decimals by the one rounding rule of every output (shardeval.numbers.fmt): the number's
// shortest decimal form, a tie to even (443/800 is 0.5538, 1/32 is 0.0312; toFixed says 0.5537 and
// 0.0313). ICU reads a double as that shortest form, so Intl's halfEven is the same rule.
var fourDecimals = (function () {
  var format = new Intl.NumberFormat('en-US', {minimumFractionDigits: 4, maximumFractionDigits: 4, useGrouping: false,
                                               roundingMode: 'halfEven'});
  return function (v) { return format.format(v); };
})();
