package natsapi

// SemVer is semver, for tests.
var SemVer = semver
