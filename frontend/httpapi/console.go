package httpapi

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/airlock-run/airlock/frontend/console"
)

// The approval console (package console's page, script and styles) is
// served under /ui/ when Options.UI is set (api -ui, on by default). An
// approver signs in with their token; the browser keeps it in a session
// cookie that is Secure, HttpOnly (the page's script never reads it) and
// SameSite=Strict, scoped to the host (__Host-), never in a URL. The
// console's JSON routes, under /ui/api/, take that cookie instead of a
// bearer header, with the same scopes, queue bindings and decisions as
// /v1's; a request that changes something (a decision, signing out) must
// also come from the console's own origin and carry the CSRF token the
// session answer gives (X-CSRF-Token): an HMAC of a fixed label keyed
// with the token itself, which another site can neither read nor
// compute. Every /ui/ response carries console.CSP and refuses framing.

// sessionCookie is the console's cookie: it holds the token.
const sessionCookie = "__Host-airlock-console"

// Bounds of a sign-in: its body, how many are read at once (apart from
// the request bodies of tokens), and how long its body may take.
const (
	maxSignInBody = 4 << 10
	maxSignIns    = 64
	signInRead    = 10 * time.Second
)

// csrfHeader is the header a console request that changes something
// carries.
const csrfHeader = "X-CSRF-Token"

// ConsoleSession is the answer to GET and POST /ui/api/session: who is
// signed in, whether they may decide, and the CSRF token their requests
// that change something carry.
type ConsoleSession struct {
	Name      string `json:"name"`
	CanDecide bool   `json:"can_decide"`
	CSRF      string `json:"csrf"`
}

// consoleRoutes registers the console's page, assets and JSON routes
// with route. They are the page's own, not the API's: they change with
// the page, so openapi.json and docs/http-api.md leave them out (the
// handle calls of routes are the API's, and TestHandlerRoutesInOpenAPI
// holds them to the document).
func (h *Handler) consoleRoutes(route func(string, http.HandlerFunc)) {
	route("GET /ui", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/ui/", http.StatusMovedPermanently)
	})
	route("GET /ui/{$}", h.consolePage)
	route("GET /ui/approvals/{id}", h.consolePage)
	route("GET /ui/assets/{file}", h.consoleAsset)

	route("GET /ui/api/session", h.uiAuth(ScopeApprovalsRead, h.consoleSession))
	route("POST /ui/api/session", h.signIn)
	route("DELETE /ui/api/session", h.uiAuth(ScopeApprovalsRead, h.signOut))
	route("GET /ui/api/approvals", h.uiAuth(ScopeApprovalsRead, h.consoleInbox))
	route("GET /ui/api/approvals/{id}", h.uiAuth(ScopeApprovalsRead, h.consoleApproval))
	route("GET /ui/api/approvals/{id}/history", h.uiAuth(ScopeApprovalsRead, h.approvalHistory))
	route("GET /ui/api/approvals/{id}/artifacts/{name...}", h.uiAuth(ScopeApprovalsRead, h.consoleArtifact))
	route("POST /ui/api/approvals/{id}/accept", h.uiAuth(ScopeApprovalsWrite, h.accept))
	route("POST /ui/api/approvals/{id}/reject", h.uiAuth(ScopeApprovalsWrite, h.reject))
	route("GET /ui/api/events", h.uiAuth(ScopeApprovalsRead, h.consoleEvents))
}

// consoleHeaders sets what every /ui/ response carries: the CSP, no
// framing, no sniffing, no referrer, and no cache of the JSON answers.
func consoleHeaders(w http.ResponseWriter) {
	hd := w.Header()
	hd.Set("Content-Security-Policy", console.CSP)
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Referrer-Policy", "no-referrer")
	hd.Set("Cross-Origin-Opener-Policy", "same-origin")
	hd.Set("Cross-Origin-Resource-Policy", "same-origin")
	hd.Set("Cache-Control", "no-store")
}

// consolePage serves the console's one page (the inbox and an approval
// are the same page; its script reads the path).
func (h *Handler) consolePage(w http.ResponseWriter, r *http.Request) {
	h.serveAsset(w, r, "index.html", "text/html; charset=utf-8")
}

// consoleAsset serves the console's scripts and style sheet.
func (h *Handler) consoleAsset(w http.ResponseWriter, r *http.Request) {
	switch f := r.PathValue("file"); f {
	case "app.js", "approval.js":
		h.serveAsset(w, r, f, "text/javascript; charset=utf-8")
	case "app.css":
		h.serveAsset(w, r, f, "text/css; charset=utf-8")
	default:
		h.fail(w, r, &Problem{Type: ProblemNotFound, Status: http.StatusNotFound, Detail: "no console asset " + f})
	}
}

func (h *Handler) serveAsset(w http.ResponseWriter, r *http.Request, name, ct string) {
	b, err := fs.ReadFile(console.Assets, name)
	if err != nil {
		h.internal(w, r, err)
		return
	}
	w.Header().Set("Content-Type", ct)
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = w.Write(b)
	}
}

// csrfOf is the CSRF token of a session whose cookie holds token.
func csrfOf(token string) string {
	m := hmac.New(sha256.New, []byte(token))
	m.Write([]byte("airlock console csrf v1"))
	return hex.EncodeToString(m.Sum(nil))
}

// sameOrigin reports whether r comes from a page of this server: its
// Origin, when sent, names r's host, and its Sec-Fetch-Site, when sent,
// says same-origin. A browser sends one or both with every POST and
// DELETE.
func sameOrigin(r *http.Request) bool {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" {
		return false
	}
	o := r.Header.Get("Origin")
	if o == "" {
		return r.Header.Get("Sec-Fetch-Site") == "same-origin"
	}
	u, err := url.Parse(o)
	return err == nil && u.Host != "" && strings.EqualFold(u.Host, r.Host)
}

// uiAuth is auth for the console's routes: the token comes from the
// session cookie. A request that changes something must come from the
// console's own origin and carry the session's CSRF token.
func (h *Handler) uiAuth(scope Scope, next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		value := cookieToken(r)
		t := h.tokens.Lookup(value)
		if t == nil {
			h.fail(w, r, &Problem{Type: ProblemUnauthorized, Status: http.StatusUnauthorized,
				Detail: "not signed in: sign in with your token"})
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			if !sameOrigin(r) {
				h.fail(w, r, &Problem{Type: ProblemForbidden, Status: http.StatusForbidden, Field: "Origin",
					Detail: "refused: the request does not come from the console's own origin"})
				return
			}
			if subtle.ConstantTimeCompare([]byte(r.Header.Get(csrfHeader)), []byte(csrfOf(value))) != 1 {
				h.fail(w, r, &Problem{Type: ProblemForbidden, Status: http.StatusForbidden, Field: csrfHeader,
					Detail: "refused: the request lacks the session's CSRF token (" + csrfHeader + ")"})
				return
			}
		}
		h.authorized(w, r, t, scope, next)
	}
}

// cookieToken returns the token r's session cookie holds, or "".
func cookieToken(r *http.Request) string {
	c, err := r.Cookie(sessionCookie)
	if err != nil {
		return ""
	}
	b, err := base64.RawURLEncoding.DecodeString(c.Value)
	if err != nil {
		return ""
	}
	return string(b)
}

// setSessionCookie sets the session cookie to token ("" and maxAge -1:
// forget it). The token is base64url-encoded: a cookie's value may not
// hold every byte a token may.
func setSessionCookie(w http.ResponseWriter, token string, maxAge int) {
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: base64.RawURLEncoding.EncodeToString([]byte(token)),
		Path: "/", MaxAge: maxAge, Secure: true, HttpOnly: true, SameSite: http.SameSiteStrictMode})
}

// consoleSession serves GET /ui/api/session.
func (h *Handler) consoleSession(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, sessionOf(tokenOf(r), cookieToken(r)))
}

func sessionOf(t *Token, value string) ConsoleSession {
	return ConsoleSession{Name: t.Name, CanDecide: t.Grants(ScopeApprovalsWrite), CSRF: csrfOf(value)}
}

// signIn serves POST /ui/api/session: {"token": "..."} from the console's
// own origin; a token that holds approvals:read gets the session cookie.
func (h *Handler) signIn(w http.ResponseWriter, r *http.Request) {
	if !sameOrigin(r) {
		h.fail(w, r, &Problem{Type: ProblemForbidden, Status: http.StatusForbidden, Field: "Origin",
			Detail: "refused: sign in from the console's own page"})
		return
	}
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(signInRead))
	b, ok := h.readBody(w, r, maxSignInBody, "token", func(max int64) string {
		return fmt.Sprintf("token: the body is more than %d bytes", max)
	})
	if !ok {
		return
	}
	var in struct {
		Token string `json:"token"`
	}
	if err := json.Unmarshal(b, &in); err != nil || strings.TrimSpace(in.Token) == "" {
		h.fail(w, r, &Problem{Type: ProblemBadRequest, Status: http.StatusBadRequest, Field: "token",
			Detail: `token: send {"token": "YOUR TOKEN"}`})
		return
	}
	value := strings.TrimSpace(in.Token)
	t := h.tokens.Lookup(value)
	if t == nil {
		h.fail(w, r, &Problem{Type: ProblemUnauthorized, Status: http.StatusUnauthorized, Field: "token", Detail: "unknown token"})
		return
	}
	if rw, ok := w.(*responseWriter); ok {
		rw.token = t
	}
	if !t.Grants(ScopeApprovalsRead) {
		h.fail(w, r, &Problem{Type: ProblemForbidden, Status: http.StatusForbidden, Field: "token", RequiredScope: ScopeApprovalsRead,
			Detail: fmt.Sprintf("token %s does not hold the scope %s: the console is for approvers", t.Name, ScopeApprovalsRead)})
		return
	}
	setSessionCookie(w, value, 0)
	writeJSON(w, http.StatusOK, sessionOf(t, value))
}

// signOut serves DELETE /ui/api/session: the browser forgets the cookie.
func (h *Handler) signOut(w http.ResponseWriter, r *http.Request) {
	setSessionCookie(w, "", -1)
	w.WriteHeader(http.StatusNoContent)
}
