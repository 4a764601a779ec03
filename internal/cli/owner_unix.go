//go:build unix

package cli

import (
	"fmt"
	"os"
	"syscall"
)

// private reports whether path (not followed if a link) is owned by the
// current user and writable by no one else: the only dev URL file and
// directory a command trusts. In a shared temporary directory another
// user could create them first and point the commands at their Redis.
func private(path string) error {
	st, err := os.Lstat(path)
	if err != nil {
		return err
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("%s: no owner to check", path)
	}
	if int(sys.Uid) != os.Getuid() {
		return fmt.Errorf("%s is owned by uid %d, not by you (uid %d)", path, sys.Uid, os.Getuid())
	}
	if st.Mode()&os.ModeSymlink != 0 || st.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("%s is a link or writable by others (%s)", path, st.Mode())
	}
	return nil
}
