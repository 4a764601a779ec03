// Package confine holds the kernel primitives of confinement that the
// sandbox's helper (internal/isolation/sandbox) and the output contract's
// validation child (contract) both put on themselves: a Landlock ruleset,
// from the ABI probe to restrict_self, and a seccomp filter's guard of
// the machine's ABI and its loading. What each allows stays with its
// owner; this package only speaks to the kernel.
//
// It builds on Linux only; elsewhere the package is empty, so that the
// portable packages that import it on Linux build everywhere.
package confine
