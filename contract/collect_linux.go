package contract

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net/http"
	"path"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/airlock-run/airlock/record"
	"github.com/airlock-run/airlock/tmpfs"
)

// maxListEntries bounds the entries listed below the directory of each glob;
// a tree with more is an error (ErrTooManyArtifacts), not a partial match.
const maxListEntries = 100_000

// Collected is what CollectArtifacts found.
type Collected struct {
	// Artifacts are the regular files that match, sorted by Name.
	Artifacts []record.Artifact
	// Data holds the content of each artifact, by Name.
	Data map[string][]byte
	// Refused are the entries that match a glob but were not taken, sorted
	// by Path: symlinks, FIFOs, sockets and devices (never followed or
	// read), a glob's directory that is a symlink or not a directory, and
	// regular files not owned by the workspace uid (Type "file": a hard
	// link to a file a step did not write).
	Refused []record.File
}

// Bytes returns the total size of the artifacts.
func (c *Collected) Bytes() int64 {
	var n int64
	for _, a := range c.Artifacts {
		n += a.Bytes
	}
	return n
}

// CollectArtifacts finds the files of the workspace that match globs (see
// CheckGlob) and reads them.
//
// Each glob's directory (its leading components without a pattern
// character, e.g. "out" for "out/*.csv") is listed without following links,
// and every entry below it is matched with path.Match against its
// workspace-relative path. Regular files are taken; symlinks, FIFOs,
// sockets and devices that match are reported in Refused and never opened
// for reading; matching directories are ignored. Each file is read with
// Workspace.ReadFile.
//
// More than lim.MaxCount matching files is ErrTooManyArtifacts; more than
// lim.MaxBytes in all is ErrArtifactsTooLarge (checked on the listed sizes
// before anything is read, and again on what is read); both errors name the
// numbers. Each artifact has its Name (the workspace-relative path), Bytes,
// SHA256 (hex) and ContentType: "application/json" for a .json file that
// holds valid JSON, "text/csv; charset=utf-8" for a .csv file that is valid
// UTF-8, otherwise net/http.DetectContentType of its first 512 bytes.
// Errors do not name the spec's field: the caller says "output.artifacts".
func CollectArtifacts(ws *tmpfs.Workspace, globs []string, lim Limits) (*Collected, error) {
	lim = lim.Resolved()
	for _, g := range globs {
		if err := CheckGlob(g); err != nil {
			return nil, err
		}
	}
	c := &Collected{Data: map[string][]byte{}}
	listed := map[string][]record.File{}
	refused := map[string]record.File{}
	files := map[string]int64{} // matching regular files: their listed size
	for _, g := range globs {
		dir := globDir(g)
		entries, ok := listed[dir]
		if !ok {
			var bad *record.File
			var err error
			entries, bad, err = listDir(ws, dir)
			if err != nil {
				return nil, err
			}
			if bad != nil {
				refused[bad.Path] = *bad
			}
			listed[dir] = entries
		}
		for _, e := range entries {
			if ok, _ := path.Match(g, e.Path); !ok {
				continue
			}
			switch e.Type {
			case "file":
				files[e.Path] = e.Bytes
			case "dir":
			default:
				refused[e.Path] = e
			}
		}
	}
	if len(files) > lim.MaxCount {
		return nil, fmt.Errorf("%d files match %s, more than the cap of %d: %w", len(files), strings.Join(globs, " "), lim.MaxCount, ErrTooManyArtifacts)
	}
	var listedBytes int64
	for _, n := range files {
		listedBytes += n
	}
	if listedBytes > lim.MaxBytes {
		return nil, fmt.Errorf("%d files of %d bytes in all, more than the cap of %d: %w", len(files), listedBytes, lim.MaxBytes, ErrArtifactsTooLarge)
	}
	var total int64
	for _, name := range slices.Sorted(maps.Keys(files)) {
		data, err := ws.ReadFile(name, lim.MaxBytes-total)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue // removed since it was listed
		case errors.Is(err, tmpfs.ErrTooLarge):
			return nil, fmt.Errorf("%s makes more than the cap of %d bytes: %w", name, lim.MaxBytes, ErrArtifactsTooLarge)
		case errors.Is(err, tmpfs.ErrNotRegular), errors.Is(err, tmpfs.ErrSymlink), errors.Is(err, tmpfs.ErrNotOwned):
			f := record.File{Path: name, Type: "file"}
			var te *tmpfs.TypeError
			if errors.As(err, &te) {
				f.Type = te.Type
			} else if errors.Is(err, tmpfs.ErrSymlink) {
				f.Type = "symlink"
			}
			refused[name] = f
			continue
		case err != nil:
			return nil, err
		}
		total += int64(len(data))
		sum := sha256.Sum256(data)
		c.Artifacts = append(c.Artifacts, record.Artifact{
			Name:        name,
			Bytes:       int64(len(data)),
			SHA256:      hex.EncodeToString(sum[:]),
			ContentType: contentType(name, data),
		})
		c.Data[name] = data
	}
	for _, p := range slices.Sorted(maps.Keys(refused)) {
		c.Refused = append(c.Refused, refused[p])
	}
	return c, nil
}

// listDir lists dir below the workspace, all of it or an error. A dir that is
// missing gives no entry; one that is (or is below) a symlink, or that is a
// FIFO, socket or device, gives no entry and that entry, to refuse.
func listDir(ws *tmpfs.Workspace, dir string) ([]record.File, *record.File, error) {
	entries, truncated, err := ws.List(dir, maxListEntries)
	var te *tmpfs.TypeError
	switch {
	case errors.As(err, &te):
		if te.Type == "file" {
			return nil, nil, nil
		}
		return nil, &record.File{Path: te.Path, Type: te.Type}, nil
	case errors.Is(err, tmpfs.ErrSymlink):
		// A directory above dir is a symlink: find which, to report it.
		comps := strings.Split(dir, "/")
		for i := 1; i < len(comps); i++ {
			at := strings.Join(comps[:i], "/")
			if _, _, err := ws.List(at, 0); errors.As(err, &te) {
				return nil, &record.File{Path: te.Path, Type: te.Type}, nil
			}
		}
		return nil, &record.File{Path: dir, Type: "symlink"}, nil
	case err != nil:
		return nil, nil, err
	case truncated:
		return nil, nil, fmt.Errorf("could not list %s entirely: more than %d entries, deeper than 256 levels, or a directory that cannot be read", dir, maxListEntries)
	}
	return entries, nil, nil
}

// contentType is the content type of the artifact name holding data.
func contentType(name string, data []byte) string {
	switch strings.ToLower(path.Ext(name)) {
	case ".json":
		if json.Valid(data) {
			return "application/json"
		}
	case ".csv":
		if utf8.Valid(data) {
			return "text/csv; charset=utf-8"
		}
	}
	return http.DetectContentType(data[:min(len(data), 512)])
}
