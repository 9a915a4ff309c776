// The language switch (English | 中文) keeps the reader on the same section.
// Its link goes to the same page in the other folder (tools/site/book_languages.py);
// when the reader uses it, the id of the section they are reading is added: the
// last section whose heading has scrolled up to the line under the sticky header,
// or the address's own #anchor when the page is still at its top. Section ids are the
// same in both languages, so the other page opens at the same place.
(function () {
  "use strict";

  function readingSection() {
    // the reading line: just under the sticky header, where an #anchor jump puts a
    // heading (the page's scroll-padding-top), with a few pixels of slack
    var pad = parseFloat(getComputedStyle(document.documentElement).scrollPaddingTop);
    var limit = (isNaN(pad) ? 0 : pad) + 16;
    var found = null;
    var sections = document.querySelectorAll("article section[id]");
    for (var i = 0; i < sections.length; i++) {
      if (sections[i].getBoundingClientRect().top <= limit) found = sections[i];
    }
    if (found) return found.id;
    return window.location.hash ? window.location.hash.slice(1) : "";
  }

  function aim(link) {
    var base = link.getAttribute("data-page") || link.getAttribute("href");
    base = base.split("#")[0];
    link.setAttribute("data-page", base);
    var id = readingSection();
    link.setAttribute("href", id ? base + "#" + encodeURIComponent(id) : base);
  }

  function wire() {
    var links = document.querySelectorAll(".graphopt-language-switch a");
    for (var i = 0; i < links.length; i++) {
      var link = links[i];
      // before the browser follows (or copies) it: a click, a middle click, a key
      ["mousedown", "focus", "click", "touchstart"].forEach(function (kind) {
        link.addEventListener(kind, function (event) { aim(event.currentTarget); });
      });
    }
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", wire);
  } else {
    wire();
  }
})();
