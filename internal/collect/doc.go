// Package collect reads what a run left in its workspace for its output
// contract: the result file and the artifact files its globs match. Every
// file in a workspace was written by untrusted code: the reads go through
// tmpfs.Workspace, so they never follow a symbolic link, never block on a
// FIFO and never read without a bound; what is not a regular file is
// refused and reported, never read. The checks of what was read (JSON,
// numbers, schema) are package contract's.
//
// It builds on Linux only; elsewhere the package is empty.
package collect
