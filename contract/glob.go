package contract

import (
	"fmt"
	"path"
	"strings"
)

// CheckGlob reports whether g can be an artifact glob: a clean relative
// path whose components are path.Match patterns, matched against the
// workspace-relative path of each file, e.g. "out/*.csv" or "out/*/*.json".
// A "*" never matches a "/", and "**" is not supported (it would silently
// act as "*"): name each level. Errors match ErrBadGlob.
func CheckGlob(g string) error {
	switch {
	case g == "" || g == "." || strings.HasPrefix(g, "/") || path.Clean(g) != g:
		return fmt.Errorf("%w %q: want a clean relative path such as out/*.csv", ErrBadGlob, g)
	case strings.Contains(g, "**"):
		return fmt.Errorf(`%w %q: "**" is not supported; "*" matches within one directory, so name each level (out/*/*.csv)`, ErrBadGlob, g)
	case strings.ContainsRune(g, 0):
		return fmt.Errorf("%w %q: contains a NUL byte", ErrBadGlob, g)
	}
	for _, c := range strings.Split(g, "/") {
		if c == ".." {
			return fmt.Errorf("%w %q: leaves the workspace", ErrBadGlob, g)
		}
	}
	if _, err := path.Match(g, ""); err != nil {
		return fmt.Errorf("%w %q: %v", ErrBadGlob, g, err)
	}
	return nil
}

// globDir returns the directory below which the files matching g are: its
// leading components that hold no pattern character, or "." when the first
// one does. CollectArtifacts lists it.
func globDir(g string) string {
	comps := strings.Split(g, "/")
	n := 0
	for n < len(comps)-1 && !strings.ContainsAny(comps[n], `*?[\`) {
		n++
	}
	if n == 0 {
		return "."
	}
	return strings.Join(comps[:n], "/")
}
