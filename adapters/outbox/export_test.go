package outbox

// SlotName is slotName, for the tests outside the package.
var SlotName = slotName

// LagQuery is lagQuery, for the tests outside the package.
const LagQuery = lagQuery

// ByThePrimaryKey is byThePrimaryKey, for the tests outside the package.
var ByThePrimaryKey = byThePrimaryKey
