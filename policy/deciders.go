package policy

import (
	"maps"
	"regexp"
	"slices"
)

// A notification may carry the decision itself: a webhook's or an ntfy
// channel's one-time decision links decide as the channel's approver, and
// a Slack channel with its app's signing secret takes button clicks, each
// deciding as the toolgate identity its slackUsers maps the clicking
// Slack user to. This file holds what the policy says of those
// identities; package gate decides.

// slackUserRE is a Slack user id: U or W and upper-case letters and digits.
var slackUserRE = regexp.MustCompile(`^[UW][A-Z0-9]{2,31}$`)

// maxSlackUsers bounds a channel's slackUsers.
const maxSlackUsers = 1000

// checkDeciders checks a channel's approver, signingSecret and
// slackUsers. at names a field of the channel.
func checkDeciders(errs *errorList, at func(string) string, c Channel) {
	if c.Approver != "" {
		switch {
		case c.Type == ChannelSlack:
			errs.add(at("approver"), "a Slack channel decides as the clicking user: map Slack users with slackUsers (and give signingSecret) instead")
		case len(c.Approver) > 256:
			errs.add(at("approver"), "user id must be 1 to 256 bytes, got %d", len(c.Approver))
		default:
			checkOnePerson(errs, at("approver"), c.Approver, "the channel's decision links decide as that user")
		}
	}
	if c.Type != ChannelSlack && c.Type.Valid() {
		if c.SigningSecret != "" {
			errs.add(at("signingSecret"), "only a Slack channel has a signing secret (its app's, for button clicks)")
		}
		if c.SlackUsers != nil {
			errs.add(at("slackUsers"), "only a Slack channel maps Slack users")
		}
		return
	}
	switch s := c.SigningSecret; {
	case s == "":
		if len(c.SlackUsers) > 0 {
			errs.add(at("signingSecret"), "required with slackUsers: button clicks are verified with the Slack app's signing secret")
		}
		return
	case s == RedactedValue:
		errs.add(at("signingSecret"), "%s", redactedMsg)
	case IsSecretRef(s):
		if msg := checkSecretRef(s); msg != "" {
			errs.add(at("signingSecret"), "%s", msg)
		}
	case len(s) > maxSecretLen:
		errs.add(at("signingSecret"), "at most %d bytes, got %d", maxSecretLen, len(s))
	}
	if len(c.SlackUsers) == 0 {
		errs.add(at("slackUsers"), "required with signingSecret: map each Slack user id who may decide to a toolgate identity, e.g. {U012ABCDEF: alice}")
	}
	if len(c.SlackUsers) > maxSlackUsers {
		errs.add(at("slackUsers"), "at most %d users, got %d", maxSlackUsers, len(c.SlackUsers))
	}
	for _, id := range slices.Sorted(maps.Keys(c.SlackUsers)) {
		f := at(index("slackUsers", id))
		if !slackUserRE.MatchString(id) {
			errs.add(f, "must be a Slack user id (U or W, then capital letters and digits, e.g. U012ABCDEF), got %q", id)
		}
		if u := c.SlackUsers[id]; u == "" || len(u) > 256 {
			errs.add(f, "toolgate user id must be 1 to 256 bytes, got %q", u)
		} else {
			checkOnePerson(errs, f, u, "a Slack user decides as one toolgate user")
		}
	}
}

// SlackUser returns the toolgate identity a Slack channel maps a Slack
// user to.
func (c Channel) SlackUser(slackID string) (string, bool) {
	u, ok := c.SlackUsers[slackID]
	return u, ok && u != ""
}
