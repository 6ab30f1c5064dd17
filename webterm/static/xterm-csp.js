// xterm.js under a strict Content-Security-Policy (style-src falls back to
// default-src 'self', no 'unsafe-inline'). Its DOM renderer styles the
// terminal with <style> elements whose text it sets (cell size, theme
// colours, the scrollbar) and gives 24-bit colours with
// setAttribute('style', ...); the browser blocks both, and the terminal
// comes out unsized and black on black (xtermjs/xterm.js#4445, no option
// for it in 6.0). The CSSOM is not subject to CSP, so this module, imported
// before xterm, routes both through it: a <style> made by createElement
// gets a constructed stylesheet adopted by its document, and a style
// attribute becomes element.style.cssText. Nothing else on the page makes
// <style> elements or style attributes.

const createElement = Document.prototype.createElement;
const setAttribute = Element.prototype.setAttribute;

Document.prototype.createElement = function (name, options) {
  if (String(name).toLowerCase() !== 'style') return createElement.call(this, name, options);
  const doc = this;
  const sheet = new CSSStyleSheet();
  doc.adoptedStyleSheets = [...doc.adoptedStyleSheets, sheet];
  // A <template> stands in: inert, never rendered, so inserting it is no
  // inline style for CSP to refuse; xterm only sets its text and removes it.
  const el = createElement.call(doc, 'template');
  let text = '';
  Object.defineProperty(el, 'textContent', {
    get: () => text,
    set: (v) => {
      text = String(v ?? '');
      sheet.replaceSync(text);
    },
  });
  el.remove = function () {
    doc.adoptedStyleSheets = doc.adoptedStyleSheets.filter((s) => s !== sheet);
    Element.prototype.remove.call(this);
  };
  return el;
};

Element.prototype.setAttribute = function (name, value) {
  if (String(name).toLowerCase() === 'style' && this.style) {
    this.style.cssText = String(value);
    return;
  }
  setAttribute.call(this, name, value);
};
