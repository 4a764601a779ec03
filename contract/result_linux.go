package contract

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"

	"github.com/airlock-run/airlock/tmpfs"
)

// ReadResult reads the result file rel (the spec's output.result, a clean
// path relative to the workspace) and checks that it holds one JSON value,
// which it returns as written.
//
// The file is read with Workspace.ReadFile: it must be a regular file owned
// by the workspace's uid, reached without a symlink, of at most max bytes
// (DefaultMaxResult when max <= 0); a symlink or FIFO is refused without
// being followed or opened for reading, so its target's content is never
// returned. Errors, each matched with errors.Is:
//   - no such file: ErrNoResult (and fs.ErrNotExist);
//   - not a regular file: tmpfs.ErrNotRegular (a *tmpfs.TypeError says
//     what it is); a symlink among its directories: tmpfs.ErrSymlink; not
//     owned by the workspace uid: tmpfs.ErrNotOwned;
//   - larger than max: tmpfs.ErrTooLarge;
//   - not JSON: ErrResultNotJSON;
//   - an object with a key twice, anywhere: ErrDuplicateKey (a
//     *DuplicateKeyError names the key's JSON pointer). Readers
//     disagree on which value counts: the schema's validator and the risk
//     policy would see the last, others the first.
//
// Errors name rel but not the spec's field: the caller says "output.result".
func ReadResult(ws *tmpfs.Workspace, rel string, max int64) ([]byte, error) {
	if max <= 0 {
		max = DefaultMaxResult
	}
	data, err := ws.ReadFile(rel, max)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("%w: %w", ErrNoResult, err)
	case err != nil:
		return nil, err // it names rel
	}
	if !json.Valid(data) {
		var v any
		err := json.Unmarshal(data, &v) // for the reason
		return nil, fmt.Errorf("%s: %w: %v", rel, ErrResultNotJSON, err)
	}
	if err := CheckDuplicateKeys(data); err != nil {
		return nil, fmt.Errorf("%s: %w", rel, err)
	}
	return data, nil
}
