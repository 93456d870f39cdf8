package httpapi

import (
	"fmt"
	"net"
	"slices"
	"strings"
)

// DNS rebinding: a page on evil.example can make its own name resolve to
// 127.0.0.1 (or to any address the victim's browser reaches) after it
// loaded, and then read whatever the server there answers, as same-origin
// requests to evil.example, with no CORS check. An open API on loopback
// answers everything. The one thing such a request cannot fake is its
// Host header, which names evil.example; so the API answers only requests
// whose Host is a name it is known by.

// loopbackHosts are the names of this machine that every allowed-hosts
// list starts with by default.
var loopbackHosts = []string{"localhost", "127.0.0.1", "::1"}

// DefaultAllowedHosts is the allowed-hosts list for an API listening on
// listen (HOST:PORT): localhost, 127.0.0.1, ::1 and the listen address's
// host. Listening on every address (0.0.0.0, ::, or no host), the names
// clients use (a load balancer's, an ingress's, the pod's IP) cannot be
// known, and the list is "*", any host: such an API is never open (it
// needs tokens, which a rebinding page does not have), and --allowed-hosts
// narrows it.
func DefaultAllowedHosts(listen string) []string {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		host = listen
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		return []string{"*"}
	}
	hosts := slices.Clone(loopbackHosts)
	if h := normalHost(host); !slices.Contains(hosts, h) {
		hosts = append(hosts, h)
	}
	return hosts
}

// CheckAllowedHosts says what is wrong with an allowed-hosts list, naming
// the entry. An entry is a host name or IP address (no port: any port of
// an allowed host is), "*.example.com" for every name under example.com,
// or "*" for any host.
func CheckAllowedHosts(hosts []string) error {
	for _, h := range hosts {
		name := strings.TrimPrefix(h, "*.")
		switch {
		case h == "*":
		case h == "" || name == "":
			return fmt.Errorf("an empty host name")
		case strings.Contains(name, "*"):
			return fmt.Errorf("%q: * stands only for a whole host (\"*\") or the names under a domain (\"*.example.com\")", h)
		case strings.ContainsAny(name, "/ ") || strings.Contains(name, "://"):
			return fmt.Errorf("%q: want a host name or IP address, not a URL", h)
		case net.ParseIP(strings.Trim(name, "[]")) == nil && strings.Contains(name, ":"):
			return fmt.Errorf("%q: want a host name without a port (every port of an allowed host is allowed)", h)
		}
	}
	return nil
}

// allowedHosts matches Host headers against a list.
type allowedHosts struct {
	any      bool
	exact    map[string]bool
	suffixes []string // ".example.com" for "*.example.com"
}

func newAllowedHosts(hosts []string) *allowedHosts {
	if hosts == nil {
		hosts = loopbackHosts
	}
	a := &allowedHosts{exact: map[string]bool{}}
	for _, h := range hosts {
		switch {
		case h == "*":
			a.any = true
		case strings.HasPrefix(h, "*."):
			a.suffixes = append(a.suffixes, "."+normalHost(h[2:]))
		default:
			a.exact[normalHost(h)] = true
		}
	}
	return a
}

// allows reports whether a request's Host header (r.Host: a name or an
// address, maybe with a port) is on the list.
func (a *allowedHosts) allows(hostHeader string) bool {
	if a.any {
		return true
	}
	host := hostHeader
	if h, _, err := net.SplitHostPort(hostHeader); err == nil {
		host = h
	}
	host = normalHost(host)
	if host == "" {
		return false
	}
	if a.exact[host] {
		return true
	}
	for _, s := range a.suffixes {
		if strings.HasSuffix(host, s) {
			return true
		}
	}
	return false
}

// normalHost is how host names compare: lower case, no trailing dot, an
// IPv6 address without brackets and in its canonical form.
func normalHost(h string) string {
	h = strings.TrimSuffix(strings.ToLower(strings.Trim(h, "[]")), ".")
	if ip := net.ParseIP(h); ip != nil {
		return ip.String()
	}
	return h
}
