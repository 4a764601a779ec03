package httpapi

import (
	_ "embed"
	"net/http"

	"github.com/airlock-run/airlock/tasks"
)

// OpenAPI is the OpenAPI 3.1 document of the API (frontend/httpapi/openapi.json),
// served at /openapi.json. Its TaskSpec schemas are tasks.SpecSchema's,
// checked by the package's tests (go test ./httpapi -run OpenAPI -update
// writes them again after a change of the spec's schema).
//
//go:embed openapi.json
var OpenAPI []byte

func (h *Handler) serveOpenAPI(w http.ResponseWriter, r *http.Request) {
	serveDoc(w, r, "application/json", OpenAPI)
}

func (h *Handler) serveSpecSchema(w http.ResponseWriter, r *http.Request) {
	serveDoc(w, r, "application/schema+json", tasks.SpecSchema)
}

func serveDoc(w http.ResponseWriter, r *http.Request, contentType string, b []byte) {
	hd := w.Header()
	hd.Set("Content-Type", contentType)
	hd.Set("Cache-Control", "public, max-age=300")
	hd.Set("Access-Control-Allow-Origin", "*") // documents, for editors and tools
	hd.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = w.Write(b)
	}
}
