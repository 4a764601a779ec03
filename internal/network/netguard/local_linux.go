//go:build linux

package netguard

import (
	"net/netip"
	"syscall"
)

// Route types of the kernel's rtmsg (linux/rtnetlink.h) that deliver to
// this host.
const (
	rtnLocal   = 2 // RTN_LOCAL
	rtnAnycast = 4 // RTN_ANYCAST
)

// localPrefixes returns what is routed to this host: every "local" and
// "anycast" route of every routing table (each interface address has
// one; "ip route add local 10.9.0.0/16 dev lo" makes a whole range
// local), and the interfaces' addresses besides.
func localPrefixes() ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, family := range []int{syscall.AF_INET, syscall.AF_INET6} {
		rib, err := syscall.NetlinkRIB(syscall.RTM_GETROUTE, family)
		if err != nil {
			return nil, err
		}
		msgs, err := syscall.ParseNetlinkMessage(rib)
		if err != nil {
			return nil, err
		}
		for i := range msgs {
			m := &msgs[i]
			if m.Header.Type != syscall.RTM_NEWROUTE || len(m.Data) < syscall.SizeofRtMsg {
				continue
			}
			// struct rtmsg: family, dst_len, src_len, tos, table,
			// protocol, scope, type (one byte each), flags.
			dstLen, typ := int(m.Data[1]), m.Data[7]
			if typ != rtnLocal && typ != rtnAnycast {
				continue
			}
			attrs, err := syscall.ParseNetlinkRouteAttr(m)
			if err != nil {
				return nil, err
			}
			for _, a := range attrs {
				if a.Attr.Type != syscall.RTA_DST {
					continue
				}
				ip, ok := netip.AddrFromSlice(a.Value)
				if !ok {
					continue
				}
				if p, err := ip.Unmap().Prefix(dstLen); err == nil {
					out = append(out, p)
				}
			}
		}
	}
	ifs, err := interfacePrefixes()
	if err != nil {
		return nil, err
	}
	return append(out, ifs...), nil
}
