// Package console is what the approval console shows an approver of a
// parked run, in the browser: its assets (one page, its script and its
// style sheet, embedded in the binary: no build step, nothing fetched
// from the internet) and the pure functions that turn an approval's
// untrusted output into what the page renders as text — a preview of
// each artifact by type (Preview), the numbers the policy looked at
// (Highlights, from the checks the worker recorded), and the change since the last accepted output
// (DiffResult, DiffTable).
//
// The HTTP side (sign-in, the routes under /ui/, the checks of who may
// read and decide) is package httpapi's: the console is served by the
// API, with its tokens and its decisions.
//
// Everything here treats an agent's output as data: nothing is ever
// rendered as HTML, and the page's Content-Security-Policy (CSP) forbids
// inline script and every origin but the console's own.
package console

import (
	"embed"
	"io/fs"
)

//go:embed assets
var assets embed.FS

// Assets are the console's files: index.html, its scripts app.js and
// approval.js (one approval's page), and app.css.
var Assets fs.FS = func() fs.FS {
	sub, err := fs.Sub(assets, "assets")
	if err != nil {
		panic("console: " + err.Error())
	}
	return sub
}()

// CSP is the Content-Security-Policy of every response of the console:
// scripts, styles, images and requests from its own origin only, no
// inline script or style, no plug-in, no frame, no form posted elsewhere.
const CSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
	"form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
