package tasks

// ValidPrincipal reports whether p may name who asks for a run
// (Spec.Principal), as Prepare checks it: 1-64 of [A-Za-z0-9._@+-],
// starting with a letter or a digit (an API token's name).
func ValidPrincipal(p string) bool { return principalRE.MatchString(p) }

// ValidQueue reports whether q may name a queue, as Prepare checks a
// spec's queue: 1-64 of [A-Za-z0-9_-], starting with a letter or a digit.
func ValidQueue(q string) bool { return queueRE.MatchString(q) }

// ValidActionName reports whether a may name an action, as Prepare checks
// a spec's action: 1-64 of [A-Za-z0-9._-], starting with a letter or a
// digit.
func ValidActionName(a string) bool { return nameRE.MatchString(a) }
