package jobs

import (
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/locateanything/detect/engine"
	"github.com/locateanything/detect/internal/strictjson"
)

// jobCorpus is testdata/job-corpus.json: job messages on the edge of the schema (numbers
// written as 48.0, nulls, empty strings, date-time variants and leap seconds, huge
// numbers, case variants of names, names given twice, unknown fields), each with whether
// it is valid.
type jobCorpus struct {
	Cases []struct {
		Valid         bool   `json:"valid"`
		Why           string `json:"why"`
		Job           string `json:"job"`
		DuplicateName bool   `json:"duplicate_name"`
	} `json:"cases"`
}

// TestJobCorpusSchemaAndDecoderAgree: the job schema and the worker's decoder accept
// exactly the same jobs (#23, defect 9), so a producer that validates against the schema
// never sees invalid_job, and a gateway that reads a job sees the job that runs: the
// corpus runs through both, and both must answer as it says.
func TestJobCorpusSchemaAndDecoderAgree(t *testing.T) {
	data, err := os.ReadFile("testdata/job-corpus.json")
	if err != nil {
		t.Fatal(err)
	}
	var corpus jobCorpus
	if err := json.Unmarshal(data, &corpus); err != nil {
		t.Fatal(err)
	}
	if len(corpus.Cases) < 100 {
		t.Fatalf("the corpus has %d cases; it lost some", len(corpus.Cases))
	}
	schema := loadSchema(t, jobSchemaFile)
	for _, c := range corpus.Cases {
		doc := []byte(c.Job)
		_, decErr := DecodeJob(doc)
		schemaErr := schema.Validate(doc)
		if (decErr == nil) != c.Valid || (schemaErr == nil) != c.Valid {
			t.Errorf("%s: DecodeJob says %v; the schema says %v; want valid=%v\n%.200s", c.Why, decErr, schemaErr, c.Valid, doc)
		}
		var dup *strictjson.DuplicateError
		if errors.As(decErr, &dup) != c.DuplicateName {
			t.Errorf("%s: marked duplicate_name=%v, but DecodeJob says %v", c.Why, c.DuplicateName, decErr)
		}
	}
}

// TestDecodeJobReadsWhatAGatewayReads: the attacks of #23, defect 6. A gateway that reads
// job["image"] must see the image that runs: names are exact and appear once.
func TestDecodeJobReadsWhatAGatewayReads(t *testing.T) {
	for _, c := range []struct{ name, doc, want string }{
		{"upper-case names", `{"ID":"ci-1","IMAGE":"s3://f/00.png","QUERY":"red circle"}`, `unknown field "ID"`},
		{"a case variant after the real name", `{"id":"ci-1","image":"s3://f/00.png","Image":"s3://f/05.png","query":"q"}`, `unknown field "Image"`},
		{"the same name twice", `{"id":"ci-1","image":"s3://f/00.png","image":"s3://f/05.png","query":"q"}`, `field image: member "image" appears twice`},
		{"the same name twice, escaped", `{"id":"ci-1","image":"s3://f/00.png","\u0069mage":"s3://f/05.png","query":"q"}`, `field image: member "image" appears twice`},
		{"twice inside metadata", `{"id":"ci-1","image":"s3://f/00.png","query":"q","metadata":{"tenant":"a","tenant":"b"}}`,
			`field metadata: member "tenant" appears twice in /metadata`},
	} {
		j, err := DecodeJob([]byte(c.doc))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one with %q", c.name, err, c.want)
		}
		if j != nil && j.Image == "s3://f/05.png" {
			t.Errorf("%s: the job reads the second image", c.name)
		}
	}
}

// TestDecodeJobReadsIntegersAndDateTimesAsTheSchemaDoes: the jobs of #23, defect 9, that
// the schema accepts run as the values they mean.
func TestDecodeJobReadsIntegersAndDateTimesAsTheSchemaDoes(t *testing.T) {
	head := `{"id":"a","image":"s3://b/k","query":"q",`
	for _, lit := range []string{"48", "48.0", "4.8e1", "480e-1"} {
		j, err := DecodeJob([]byte(head + `"v":1.0,"max_new_tokens":` + lit + `}`))
		if err != nil || j.MaxNewTokens != 48 || j.V != 1 {
			t.Errorf("max_new_tokens %s: %+v, %v; want 48", lit, j, err)
		}
	}
	for lit, want := range map[string]time.Time{
		"2099-12-02t10:00:00z":              time.Date(2099, 12, 2, 10, 0, 0, 0, time.UTC),
		"2099-12-02 10:00:00Z":              time.Date(2099, 12, 2, 10, 0, 0, 0, time.UTC),
		"2098-12-31T23:59:60Z":              time.Date(2098, 12, 31, 23, 59, 59, 999999999, time.UTC),
		"2099-01-01T00:59:60+01:00":         time.Date(2098, 12, 31, 23, 59, 59, 999999999, time.UTC),
		"2099-12-02T10:00:00+0530":          time.Date(2099, 12, 2, 4, 30, 0, 0, time.UTC),
		"2099-12-02T10:00:00.1234567891-01": time.Date(2099, 12, 2, 11, 0, 0, 123456789, time.UTC),
	} {
		j, err := DecodeJob([]byte(head + `"deadline":"` + lit + `"}`))
		if err != nil || j.Deadline == nil || !j.Deadline.Equal(want) {
			t.Errorf("deadline %s: %v, %v; want %v", lit, j, err, want)
		}
	}
}

// TestZeroBudgetIsRefusedAsOnPredict: max_new_tokens 0 is refused on the queue as /predict
// refuses it, with the same words and code (bad_budget), and so is a budget no worker
// could hold; an empty batch is refused rather than read as the default.
func TestZeroBudgetIsRefusedAsOnPredict(t *testing.T) {
	head := `{"id":"a","image":"s3://b/k","query":"q",`
	for lit, want := range map[string]float64{"0": 0, "-3": -3, "1e20": 1e20} {
		_, err := DecodeJob([]byte(head + `"max_new_tokens":` + lit + `}`))
		same := engine.BudgetError(want, engine.MaxNewTokensLimit)
		ie, ok := engine.AsInputError(err)
		if !ok || ie.Code != engine.CodeBadBudget || err.Error() != "field max_new_tokens: "+same.Error() {
			t.Errorf("max_new_tokens %s: error %v, want bad_budget %q", lit, err, same)
		}
	}
	_, err := DecodeJob([]byte(head + `"batch":""}`))
	if err == nil || !strings.HasPrefix(err.Error(), "field batch: ") {
		t.Errorf("batch \"\": error %v, want one about field batch", err)
	}
}
