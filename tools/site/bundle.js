// Copy the JavaScript the static site needs out of node_modules, so every page loads it
// from the site itself and nothing from a CDN:
//   _widgets/require.js      RequireJS (the widget manager loads modules through it)
//   _widgets/embed-amd.js    @jupyter-widgets/html-manager: renders embedded widget state
//                            (and its font files, which it finds next to itself)
//   _widgets/mathjax/        MathJax 3 (TeX input, CommonHTML output and its fonts)
// Usage: node tools/site/bundle.js <out-dir>   (book/conf.py adds <out-dir> to the site root)
"use strict";
const fs = require("fs");
const path = require("path");

const here = __dirname;
const modules = path.join(here, "node_modules");
const out = path.resolve(process.argv[2] || path.join(here, "..", "..", "book", "_build", "assets"));
const widgets = path.join(out, "_widgets");

function need(p) {
  if (!fs.existsSync(p)) {
    console.error(`bundle: ${p} is missing; run \`npm ci\` in tools/site first`);
    process.exit(1);
  }
  return p;
}

function copy(src, dst) {
  fs.mkdirSync(path.dirname(dst), { recursive: true });
  fs.cpSync(need(src), dst, { recursive: true });
}

fs.rmSync(widgets, { recursive: true, force: true });
copy(path.join(modules, "requirejs", "require.js"), path.join(widgets, "require.js"));

// The widget manager; webpack finds its font files relative to the script's own URL.
const dist = path.join(modules, "@jupyter-widgets", "html-manager", "dist");
for (const name of fs.readdirSync(need(dist))) {
  if (name === "embed-amd.js" || /\.(woff2?|ttf|eot|svg)$/.test(name)) {
    copy(path.join(dist, name), path.join(widgets, name));
  }
}

// MathJax: one combined TeX component plus what it loads lazily (fonts, menu, a11y);
// the speech engine (sre) is left out, nothing on the site asks for it.
const mj = path.join(modules, "mathjax", "es5");
copy(path.join(mj, "tex-chtml-full.js"), path.join(widgets, "mathjax", "tex-chtml-full.js"));
for (const dir of ["output", "ui", "a11y", "adaptors", "input"]) {
  copy(path.join(mj, dir), path.join(widgets, "mathjax", dir));
}

// A missing file here would be a 404 on the site: say so now.
for (const f of ["require.js", "embed-amd.js", "mathjax/tex-chtml-full.js"]) {
  need(path.join(widgets, f));
}
console.log(`bundle: site JavaScript in ${path.relative(process.cwd(), widgets) || widgets}`);
