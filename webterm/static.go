package webterm

import (
	"embed"
	"io/fs"
)

//go:embed static
var staticFiles embed.FS

// Static is the web terminal's page, served as is: index.html (the login
// form and the terminal), app.js, app.css and the vendored xterm.js under
// vendor/ (scripts/vendor-xterm.sh puts it there, checked against
// vendor/INTEGRITY). It is rooted so that "index.html" is at the top.
// Nothing in it comes from another origin, so the page runs under
// Content-Security-Policy: default-src 'self'.
var Static fs.FS = mustSub(staticFiles, "static")

func mustSub(f fs.FS, dir string) fs.FS {
	sub, err := fs.Sub(f, dir)
	if err != nil {
		panic("webterm: embedded " + dir + ": " + err.Error())
	}
	return sub
}
