package contract

// Internals for the tests of package contract_test.

// CacheLen returns how many schemas the cache holds and their bytes.
func CacheLen() (entries, bytes int) { return cache.len() }

// Cache bounds.
const (
	CacheMaxEntries = cacheMaxEntries
	CacheMaxBytes   = cacheMaxBytes
	MaxApplied      = maxApplied
)

// NewTestLRU returns a cache with the given bounds, for testing eviction.
func NewTestLRU(maxEntries, maxBytes int) *LRU { return &LRU{newLRU(maxEntries, maxBytes)} }

// LRU wraps the cache type for tests.
type LRU struct{ c *lru }

// Add adds a schema of size bytes whose sum starts with b, and returns
// whether the cache returned the schema given.
func (l *LRU) Add(b byte, size int) bool {
	s := &Schema{size: size}
	s.sum[0] = b
	return l.c.add(s) == s
}

// Has reports whether the schema whose sum starts with b is cached.
func (l *LRU) Has(b byte) bool {
	var sum [32]byte
	sum[0] = b
	return l.c.get(sum) != nil
}

// Len returns the entries and bytes of the cache.
func (l *LRU) Len() (int, int) { return l.c.len() }

// Estimate returns the estimated units of validating doc against s, and
// whether they stay within budget.
func Estimate(s *Schema, doc []byte, budget int64) (int64, bool) {
	v, err := decodeJSON(doc)
	if err != nil {
		panic(err)
	}
	e := &estimator{budget: budget}
	ok := e.cost(s.plan, v)
	return e.units, ok
}

// Scan returns the values of a JSON document and its number error.
func Scan(doc []byte, big bool) (int, error) {
	sh, err := scan(doc, big)
	return sh.values, err
}

// ProgSize returns what checkRegexps takes for the program size of expr,
// and whether it parses.
func ProgSize(expr string) (int64, bool) {
	info := sizeOf(expr)
	return info.insts, info.ok
}

// Weight returns the estimated compiled size of s, what the cache counts.
func Weight(s *Schema) int { return s.size }
