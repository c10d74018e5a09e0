package httpcompat

import (
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"testing"
)

// lintDoc is the part of the OpenAPI document the lint rules read.
type lintDoc struct {
	Info struct {
		Title       string `json:"title"`
		Version     string `json:"version"`
		Description string `json:"description"`
		License     *struct {
			Name       string `json:"name"`
			URL        string `json:"url"`
			Identifier string `json:"identifier"`
		} `json:"license"`
	} `json:"info"`
	Servers []struct {
		URL       string `json:"url"`
		Variables map[string]struct {
			Default string `json:"default"`
		} `json:"variables"`
	} `json:"servers"`
	Security   []map[string][]string                 `json:"security"`
	Paths      map[string]map[string]lintOp          `json:"paths"`
	Components map[string]map[string]json.RawMessage `json:"components"`
}

type lintOp struct {
	OperationID string                     `json:"operationId"`
	Summary     string                     `json:"summary"`
	Security    *[]map[string][]string     `json:"security"`
	Responses   map[string]json.RawMessage `json:"responses"`
}

// TestOpenAPIFollowsTheLintRules holds /openapi.json to the rules of redocly's recommended
// ruleset that it once failed (checked with `npx @redocly/cli lint`, which passes), so that
// CI needs no Node: a license with a URL, servers whose variables have defaults, security
// stated on every operation with schemes that exist, a 2xx and a 4xx answer and a unique
// operationId and summary on every operation, and every $ref resolving. It also ties the
// security the document states to the server: an operation that names bearerToken answers
// 401 without the token when LA_HTTP_TOKEN is set, and one that names none never does.
func TestOpenAPIFollowsTheLintRules(t *testing.T) {
	var doc lintDoc
	if err := json.Unmarshal(openAPI, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Info.Title == "" || doc.Info.Version == "" || doc.Info.Description == "" {
		t.Error("info needs a title, a version and a description")
	}
	if l := doc.Info.License; l == nil || l.Name == "" || l.URL == "" && l.Identifier == "" {
		t.Error("info.license needs a name and a url or identifier (info-license, info-license-strict)")
	}
	if len(doc.Servers) == 0 {
		t.Error("no servers (no-empty-servers)")
	}
	variable := regexp.MustCompile(`\{([^}]*)\}`)
	for _, srv := range doc.Servers {
		if srv.URL == "" || strings.HasSuffix(srv.URL, "/") || strings.Contains(srv.URL, "example.com") {
			t.Errorf("server url %q: empty, ending in /, or example.com", srv.URL)
		}
		for _, m := range variable.FindAllStringSubmatch(srv.URL, -1) {
			if v, ok := srv.Variables[m[1]]; !ok || v.Default == "" {
				t.Errorf("server url %q: variable %s has no default", srv.URL, m[1])
			}
		}
	}
	schemes := doc.Components["securitySchemes"]

	guard := newHarness(t, setup{cfg: Config{Token: "lint-token-0123456789"}})
	ids := map[string]bool{}
	for path, ops := range doc.Paths {
		for method, op := range ops {
			at := strings.ToUpper(method) + " " + path
			if op.OperationID == "" || ids[op.OperationID] || op.Summary == "" {
				t.Errorf("%s: operationId %q missing or not unique, or no summary", at, op.OperationID)
			}
			ids[op.OperationID] = true
			security := doc.Security
			if op.Security != nil {
				security = *op.Security
			} else if doc.Security == nil {
				t.Errorf("%s: no security stated, on it or globally (security-defined)", at)
			}
			needsToken := len(security) > 0
			for _, req := range security {
				if len(req) == 0 {
					continue // {}: also without credentials (LA_HTTP_TOKEN unset)
				}
				for name := range req {
					if _, ok := schemes[name]; !ok {
						t.Errorf("%s: security scheme %q is not in components.securitySchemes", at, name)
					}
				}
			}
			var ok2xx, ok4xx bool
			for code := range op.Responses {
				ok2xx = ok2xx || code[0] == '2'
				ok4xx = ok4xx || code[0] == '4'
			}
			if !ok2xx || !ok4xx {
				t.Errorf("%s: responses %v need a 2xx and a 4xx (operation-2xx-response, operation-4xx-response)", at, keys(op.Responses))
			}
			if _, ok := op.Responses["401"]; ok != needsToken {
				t.Errorf("%s: documents 401 %v, but names a bearer token %v", at, ok, needsToken)
			}
			if got := statusWithoutToken(t, guard.url, strings.ToUpper(method), path); (got == http.StatusUnauthorized) != needsToken {
				t.Errorf("%s with LA_HTTP_TOKEN set and no token: %d; the document says a token is needed: %v", at, got, needsToken)
			}
		}
	}

	refs := regexp.MustCompile(`"\$ref":\s*"#/components/([^/"]+)/([^"]+)"`)
	for _, m := range refs.FindAllStringSubmatch(string(openAPI), -1) {
		if _, ok := doc.Components[m[1]][m[2]]; !ok {
			t.Errorf("unresolved $ref #/components/%s/%s (no-unresolved-refs)", m[1], m[2])
		}
	}
}

func statusWithoutToken(t *testing.T, base, method, path string) int {
	t.Helper()
	req, err := http.NewRequest(method, base+path, strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func keys(m map[string]json.RawMessage) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
