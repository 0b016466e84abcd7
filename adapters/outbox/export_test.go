package outbox

// SlotName is slotName, for the tests outside the package.
var SlotName = slotName
