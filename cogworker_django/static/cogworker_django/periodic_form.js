// The periodic entry form: the next fire times of the cron line as it is typed (and of
// the time zone), asked of the page's preview view. Everything shown is set as text.
"use strict";
(function () {
  function start() {
    var cron = document.getElementById("id_cron");
    var zone = document.getElementById("id_timezone");
    var shown = document.querySelector(".cw-fire-times");
    var base = window.location.pathname.match(/^(.*\/periodicentry\/)/);
    if (!cron || !shown || !base) {
      return;
    }
    var url = base[1] + "preview/";
    var timer = null;
    var asked = 0;

    function show(answer) {
      var box = document.createElement(answer.error ? "div" : "ul");
      box.className = "cw-fire-times" + (answer.error ? " errornote" : "");
      if (answer.error) {
        box.textContent = answer.error;
      } else {
        answer.times.forEach(function (t) {
          var li = document.createElement("li");
          li.textContent = t;
          box.appendChild(li);
        });
      }
      shown.replaceWith(box);
      shown = box;
    }

    function ask() {
      var n = ++asked;
      var query = "?cron=" + encodeURIComponent(cron.value) +
        "&timezone=" + encodeURIComponent(zone ? zone.value : "");
      fetch(url + query, {credentials: "same-origin"})
        .then(function (r) { return r.json(); })
        .then(function (answer) {
          if (n === asked) {
            show(answer);
          }
        })
        .catch(function () {});
    }

    function later() {
      clearTimeout(timer);
      timer = setTimeout(ask, 250);
    }

    cron.addEventListener("input", later);
    if (zone) {
      zone.addEventListener("input", later);
    }
    if (cron.value) {
      ask();
    }
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
