//go:build linux

package tmpfs

// UseOpenat2ForTest makes openBeneath use openat2 (on) or the
// component-by-component walk kept for kernels without it (off), and returns
// a function that restores the previous choice.
func UseOpenat2ForTest(on bool) (restore func()) {
	old := noOpenat2.Load()
	noOpenat2.Store(!on)
	return func() { noOpenat2.Store(old) }
}

// ReleaseLockForTest closes m's lock file and nothing else, as the death of
// a worker would: its workspaces and mounts stay.
func (m *Manager) ReleaseLockForTest() error { return m.lock.Close() }
