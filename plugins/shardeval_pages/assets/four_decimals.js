// Four decimals by the one rounding rule of every output (shardeval.numbers.fmt): the number's
// shortest decimal form, a tie to even (443/800 is 0.5538, 1/32 is 0.0312; toFixed says 0.5537 and
// 0.0313). ICU reads a double as that shortest form, so Intl's halfEven is the same rule.
// percent(share, digits): a share as a percentage by the same rule (shardeval.numbers.percent):
// ICU scales the shortest decimal form by 100 exactly, so 1/400 reads 0.2% (toFixed said 0.3%).
var percent = (function () {
  var formats = {};
  return function (v, digits) {
    if (!formats[digits]) {
      formats[digits] = new Intl.NumberFormat('en-US', {style: 'percent', minimumFractionDigits: digits,
                                                         maximumFractionDigits: digits, useGrouping: false, roundingMode: 'halfEven'});
    }
    return formats[digits].format(v);
  };
})();
// decimals(v, digits): `digits` decimals by that rule; fourDecimals(v) the scores' four.
var decimals = (function () {
  var formats = {};
  return function (v, digits) {
    if (!formats[digits]) {
      formats[digits] = new Intl.NumberFormat('en-US', {minimumFractionDigits: digits, maximumFractionDigits: digits,
                                                         useGrouping: false, roundingMode: 'halfEven'});
    }
    return formats[digits].format(v);
  };
})();
var fourDecimals = function (v) { return decimals(v, 4); };
