package outbox

// SlotName is slotName, for the tests outside the package.
var SlotName = slotName

// LagQuery is lagQuery, for the tests outside the package.
const LagQuery = lagQuery

// ByThePrimaryKey is byThePrimaryKey, for the tests outside the package.
var ByThePrimaryKey = byThePrimaryKey

// HeldQuery, PendingQuery and SettleQuery are the relay's statements that
// look at the outbox's end, for the tests outside the package.
const (
	HeldQuery    = heldQuery
	PendingQuery = pendingQuery
)

var SettleQuery = settleQuery

// ServerEndGap is serverEndGap, for the tests outside the package.
const ServerEndGap = serverEndGap
