// MathJax 3 configuration for the book site. Sphinx inlines this file (mathjax_config_path
// in book/conf.py) before the local MathJax script, on pages that have math.
//
// The ipywidgets HTML manager still typesets widget labels through MathJax 2's API,
// MathJax.Hub.Queue(["Typeset", MathJax.Hub, element]); MathJax 3 has no Hub, so a page
// with both a widget and math would throw. This Hub forwards to MathJax 3's typesetPromise.
(function () {
  function queue() {
    var mj = window.MathJax;
    if (!mj || !mj.startup || !mj.startup.promise || !mj.typesetPromise) {
      return; // not loaded yet: its first pass typesets the whole page anyway
    }
    Array.prototype.forEach.call(arguments, function (job) {
      var element = Array.isArray(job) ? job[2] : null;
      mj.startup.promise
        .then(function () {
          return mj.typesetPromise(element ? [element] : undefined);
        })
        .catch(function (err) {
          console.warn("MathJax typeset failed", err);
        });
    });
  }
  var hub = { Queue: queue };
  // Keep what Sphinx and MyST configured before us (which HTML classes hold math).
  var prior = window.MathJax || {};
  var options = Object.assign({}, prior.options || {}, { enableMenu: false });
  window.MathJax = Object.assign({}, prior, {
    Hub: hub,
    options: options,
    startup: {
      ready: function () {
        window.MathJax.startup.defaultReady();
        window.MathJax.Hub = hub;
      },
    },
  });
})();
