package outbox

// LockKey is the relay lock key of a consumer group, for tests that end
// the session holding it.
var LockKey = lockKey
