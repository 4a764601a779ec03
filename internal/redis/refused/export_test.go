package refused

// For the tests of package refused_test, which import what imports this
// package (redistest imports airlock).
var StoreBounded = storeBounded

const FormatDict = formatDict
