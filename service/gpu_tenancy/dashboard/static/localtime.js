/* Each <time datetime="..."> the server wrote in UTC gets the reader's local time beside it,
   e.g. "2026-12-02 14:00 UTC (15:00 CET)". The pages read the same without this script. */
(function () {
  "use strict";
  var pad = function (n) { return (n < 10 ? "0" : "") + n; };
  var zoneName = function (date) {
    try {
      var parts = new Intl.DateTimeFormat(undefined, { timeZoneName: "short" }).formatToParts(date);
      for (var i = 0; i < parts.length; i++) { if (parts[i].type === "timeZoneName") { return parts[i].value; } }
    } catch (e) { /* an old browser: the offset alone below */ }
    return "";
  };
  var offset = function (date) {
    var minutes = -date.getTimezoneOffset(), sign = minutes < 0 ? "-" : "+";
    minutes = Math.abs(minutes);
    return "UTC" + sign + pad(Math.floor(minutes / 60)) + ":" + pad(minutes % 60);
  };
  var stamps = document.querySelectorAll("time[datetime]");
  for (var i = 0; i < stamps.length; i++) {
    var el = stamps[i], date = new Date(el.getAttribute("datetime"));
    if (isNaN(date.getTime()) || date.getTimezoneOffset() === 0 || el.querySelector(".local")) { continue; }
    var sameDay = date.getUTCFullYear() === date.getFullYear() && date.getUTCMonth() === date.getMonth() &&
      date.getUTCDate() === date.getDate();
    var text = (sameDay ? "" : date.getFullYear() + "-" + pad(date.getMonth() + 1) + "-" + pad(date.getDate()) + " ") +
      pad(date.getHours()) + ":" + pad(date.getMinutes()) + " " + (zoneName(date) || offset(date));
    var local = document.createElement("span");
    local.className = "local";
    local.title = "your local time (" + offset(date) + ")";
    local.textContent = " (" + text + ")";
    el.appendChild(local);
  }
})();
