package airlock

import "testing"

// TestVersionOf: a release tag's version, without its v; anything else is
// the dev version.
func TestVersionOf(t *testing.T) {
	for mod, want := range map[string]string{
		"v1.2.3":                               "1.2.3",
		"v1.2.3-rc.1":                          "1.2.3-rc.1",
		"v0.0.0-20261205111354-1a7db35a0b1c":   devVersion,
		"v1.2.4-0.20261205111354-1a7db35a0b1c": devVersion,
		"v1.2.3+dirty":                         devVersion,
		"(devel)":                              devVersion,
		"":                                     devVersion,
	} {
		if got := versionOf(mod); got != want {
			t.Errorf("versionOf(%q) = %q, want %q", mod, got, want)
		}
	}
}
