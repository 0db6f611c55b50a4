// Loaded between RequireJS and the ipywidgets embed script (embed-amd.js) on pages with stored
// widget state. The embed script's AMD modules are named "@jupyter-widgets/..." and find their
// webpack assets (icon fonts) next to the URL RequireJS gives each module name. Map those names
// to this folder, where book/prepare.py copies the bundle and its fonts, so every asset comes
// from the book's own static files instead of a path relative to the page or a CDN.
(function () {
  var here = document.currentScript.src.replace(/\/[^/]*$/, "");
  require.config({
    paths: {
      "@jupyter-widgets/html-manager/dist": here,
      "@jupyter-widgets": here,
    },
  });
})();
