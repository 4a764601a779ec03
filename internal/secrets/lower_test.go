package secrets

import (
	"encoding/base64"
	"strings"
	"testing"
)

func TestRedactLower(t *testing.T) {
	t.Setenv(EnvPrefix+"MIXED", "AbCdEf-Secret-42")
	set, err := Source{}.Load([]string{"MIXED"})
	if err != nil {
		t.Fatal(err)
	}
	b64 := base64.StdEncoding.EncodeToString([]byte("AbCdEf-Secret-42"))
	for _, in := range []string{
		"abcdef-secret-42.example",                    // the value, lower-cased
		"AbCdEf-Secret-42.example",                    // as is
		strings.ToLower(b64) + ".example",             // an encoding, lower-cased
		"x.abcdef-secret-42.abcdef-secret-42.example", // twice
	} {
		got := set.RedactLower(in)
		if strings.Contains(strings.ToLower(got), "abcdef-secret-42") || strings.Contains(strings.ToLower(got), strings.ToLower(b64)) || !strings.Contains(got, Mask) {
			t.Errorf("RedactLower(%q) = %q", in, got)
		}
	}
	if got := set.RedactLower("partner.example"); got != "partner.example" {
		t.Errorf("RedactLower changed text without a secret: %q", got)
	}
	var empty *Set
	if got := empty.RedactLower("abcdef-secret-42"); got != "abcdef-secret-42" {
		t.Errorf("a nil set redacted: %q", got)
	}
}
