//go:build !linux

package netguard

import "net/netip"

// localPrefixes returns the addresses of this host's interfaces
// (elsewhere than Linux the routing tables are not read).
func localPrefixes() ([]netip.Prefix, error) { return interfacePrefixes() }
