package fusefs

// NewNameStreak is for tests of the lookups that take names for new.
const NewNameStreak = newNameStreak
