// Accessibility touches the theme and the saved outputs do not make themselves
// (tests/test_accessibility.py runs axe-core on every page, both languages):
// - a box that scrolls (a wide graph, a long output, an explorer's drawing) can be
//   reached and scrolled with the keyboard: it joins the tab order, with a name;
// - the search button's accessible name starts with the words it shows;
// - an image a widget draws (the explorer's chart) says what it shows;
// - an empty table corner header gets words for screen readers;
// - the side bar's book title sits in a landmark, like the rest of the page.
// Everything is re-checked when the page changes (an explorer redraws its graph) or
// the window is resized (a box may start or stop scrolling).
(function () {
  "use strict";

  var zh = /^zh/i.test(document.documentElement.lang || "");
  var TEXT = zh ? {
    scroll: "可滚动区域（用方向键滚动）：",
    output: "代码单元的输出",
    graph: "计算图绘图",
    chart: "图表：基线与所选变换的时间、搬运字节数和峰值内存（旁边的表格给出相同的数字）",
    corner: "项目",
    home: "本书首页"
  } : {
    scroll: "Scrollable region (arrow keys scroll it): ",
    output: "output of a code cell",
    graph: "graph drawing",
    chart: "Chart: time, bytes moved and peak memory of the baseline and of the " +
      "selected passes (the table beside it gives the same numbers)",
    corner: "item",
    home: "Book home"
  };
  var SCROLLERS = ".bd-article .cell_output, .bd-article .output, .bd-article pre, " +
    ".gox-scroll, .gox-table, .pst-scrollable-table-container, .bd-article .highlight";

  function scrolls(el) {
    var style = getComputedStyle(el);
    var x = /(auto|scroll)/.test(style.overflowX) && el.scrollWidth > el.clientWidth + 1;
    var y = /(auto|scroll)/.test(style.overflowY) && el.scrollHeight > el.clientHeight + 1;
    return x || y;
  }

  function describe(el) {
    var img = el.querySelector("img[alt], svg[aria-label]");
    if (img) {
      return img.getAttribute("alt") || img.getAttribute("aria-label");
    }
    return el.closest(".gox-scroll") ? TEXT.graph : TEXT.output;
  }

  function reachScrollers() {
    var boxes = document.querySelectorAll(SCROLLERS);
    for (var i = 0; i < boxes.length; i++) {
      var el = boxes[i];
      if (el.hasAttribute("data-a11y-scroll") && !scrolls(el)) {
        el.removeAttribute("tabindex");
        el.removeAttribute("role");
        el.removeAttribute("aria-label");
        el.removeAttribute("data-a11y-scroll");
      } else if (!el.hasAttribute("tabindex") && scrolls(el)) {
        el.setAttribute("tabindex", "0");
        el.setAttribute("role", "group");
        el.setAttribute("aria-label", (TEXT.scroll + describe(el)).slice(0, 160));
        el.setAttribute("data-a11y-scroll", "");
      }
    }
  }

  function nameSearchButton() {
    var buttons = document.querySelectorAll("button.search-button-field[aria-label]");
    for (var i = 0; i < buttons.length; i++) {
      var shown = buttons[i].innerText.replace(/\s+/g, " ").trim();
      if (shown) buttons[i].setAttribute("aria-label", shown);
    }
  }

  function nameImages() {
    var imgs = document.querySelectorAll("img.widget-image:not([alt])");
    for (var i = 0; i < imgs.length; i++) imgs[i].setAttribute("alt", TEXT.chart);
  }

  function nameCorners() {
    var cells = document.querySelectorAll(".bd-article th");
    for (var i = 0; i < cells.length; i++) {
      if (!cells[i].textContent.trim() && !cells[i].querySelector("img")) {
        var hidden = document.createElement("span");
        hidden.className = "visually-hidden";
        hidden.textContent = TEXT.corner;
        cells[i].appendChild(hidden);
      }
    }
  }

  function landmarkTitle() {
    var item = document.querySelector(".sidebar-primary-items__start > " +
                                      ".sidebar-primary-item:first-child");
    if (item && !item.closest("nav, [role]") && item.querySelector(".navbar-brand")) {
      item.setAttribute("role", "navigation");
      item.setAttribute("aria-label", TEXT.home);
    }
  }

  var pending = false;
  function update() {
    pending = false;
    nameSearchButton();
    nameImages();
    nameCorners();
    landmarkTitle();
    reachScrollers();
  }
  function later() {
    if (!pending) {
      pending = true;
      window.requestAnimationFrame(update);
    }
  }

  function start() {
    update();
    var article = document.querySelector(".bd-article") || document.body;
    new MutationObserver(function (records) {
      // our own attribute changes do not count; added or removed content does
      for (var i = 0; i < records.length; i++) {
        if (records[i].type === "childList") return later();
      }
    }).observe(article, {childList: true, subtree: true});
    window.addEventListener("resize", later);
    window.addEventListener("load", later);
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
