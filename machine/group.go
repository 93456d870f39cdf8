package machine

import (
	"slices"
	"strings"
)

// GroupPrefix marks an entry of a list of people (approvers, a quorum's
// members, an escalation tier's) that names a group: group:payments-leads
// admits everyone whose sign-in puts them in payments-leads. Membership
// is the identity provider's (or the token file's), read from the
// person's sign-in when they decide; the policy names only the group.
const GroupPrefix = "group:"

// GroupOf returns the group an entry of a list of people names, and
// whether it names one rather than a user.
func GroupOf(entry string) (string, bool) { return strings.CutPrefix(entry, GroupPrefix) }

// admits reports whether who, a list of people, admits by, a person in
// groups: by named, or in a group the list names. via is that group, ""
// when by is named (a name says more than a group).
func admits(who []string, by string, groups []string) (via string, ok bool) {
	if slices.Contains(who, by) {
		return "", true
	}
	for _, entry := range who {
		if g, isGroup := GroupOf(entry); isGroup && slices.Contains(groups, g) {
			return g, true
		}
	}
	return "", false
}

// people counts the users a list of people names, leaving out its
// groups: how many there are in a group is the provider's to know.
func people(who []string) int {
	n := 0
	for _, entry := range who {
		if _, isGroup := GroupOf(entry); !isGroup {
			n++
		}
	}
	return n
}
