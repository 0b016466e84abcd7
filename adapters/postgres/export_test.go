package postgres

// PruneLock is pruneLock, for the tests outside the package.
var PruneLock = pruneLock
