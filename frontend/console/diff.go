package console

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Changes of a key or an artifact.
const (
	Added   = "added"
	Removed = "removed"
	Changed = "changed"
	Same    = "same"
)

// MaxRowChanges bounds the rows a table diff lists each way.
const MaxRowChanges = 50

// TableDiff is how a table differs from the last accepted one: rows
// added and removed, as multisets (a row moved is no change), the
// header excluded; Added and Removed list at most MaxRowChanges each.
type TableDiff struct {
	Name        string     `json:"name"`
	Change      string     `json:"change"`
	Header      []string   `json:"header,omitempty"`
	RowsAdded   int        `json:"rows_added"`
	RowsRemoved int        `json:"rows_removed"`
	Added       [][]string `json:"added,omitempty"`
	Removed     [][]string `json:"removed,omitempty"`
	// HeaderChanged: the two tables' headers differ.
	HeaderChanged bool   `json:"header_changed,omitempty"`
	Note          string `json:"note,omitempty"`
}

// MaxDiffRows bounds the rows of a table DiffTable compares: a larger
// table is said to have changed, not compared row by row (the rows of
// one version are held in memory while the other is read).
const MaxDiffRows = 200000

// DiffTable compares two versions of table artifact name, separated by
// sep. It holds the rows of before (as keys) while it reads after, then
// reads before again for the rows removed: never both tables whole.
func DiffTable(name string, before, after []byte, sep rune) TableDiff {
	d := TableDiff{Name: name, Change: Changed}
	count := map[string]int{}
	var oldHeader []string
	rows := 0
	err := eachRow(before, sep, func(header, row []string) bool {
		if row == nil {
			oldHeader, _ = cells(header)
			return true
		}
		if rows++; rows > MaxDiffRows {
			return false
		}
		count[rowKey(row)]++
		return true
	})
	switch {
	case err != nil:
		d.Note = "the accepted version is not read as a table: " + err.Error()
		return d
	case rows > MaxDiffRows:
		d.Note = fmt.Sprintf("more than %d rows: not compared row by row", MaxDiffRows)
		return d
	}
	rows = 0
	err = eachRow(after, sep, func(header, row []string) bool {
		if row == nil {
			d.Header, _ = cells(header)
			d.HeaderChanged = !slices.Equal(oldHeader, d.Header)
			return true
		}
		if rows++; rows > MaxDiffRows {
			return false
		}
		if k := rowKey(row); count[k] > 0 {
			count[k]--
			return true
		}
		d.RowsAdded++
		if len(d.Added) < MaxRowChanges {
			c, _ := cells(row)
			d.Added = append(d.Added, c)
		}
		return true
	})
	switch {
	case err != nil:
		d.Note = "this version is not read as a table: " + err.Error()
		return d
	case rows > MaxDiffRows:
		d.Added, d.RowsAdded = nil, 0
		d.Note = fmt.Sprintf("more than %d rows: not compared row by row", MaxDiffRows)
		return d
	}
	_ = eachRow(before, sep, func(_, row []string) bool {
		if row == nil {
			return true
		}
		if k := rowKey(row); count[k] > 0 {
			count[k]--
			d.RowsRemoved++
			if len(d.Removed) < MaxRowChanges {
				c, _ := cells(row)
				d.Removed = append(d.Removed, c)
			}
		}
		return true
	})
	if d.RowsAdded == 0 && d.RowsRemoved == 0 && !d.HeaderChanged {
		d.Change = Same
	}
	return d
}

// rowKey is a row as one string: its cells, each length-prefixed.
func rowKey(r []string) string {
	var b strings.Builder
	for _, c := range r {
		b.WriteString(strconv.Itoa(len(c)))
		b.WriteByte(':')
		b.WriteString(c)
	}
	return b.String()
}
