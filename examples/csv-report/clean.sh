#!/bin/sh
# Cleans a partner's CSV export and computes two indicators.
#   in/export.csv  -> out/clean.csv   (the columns that start with _ dropped)
#                  -> out/result.json (rows, paid revenue, refund rate)
set -eu
awk -F, -v OFS=, '
NR == 1 {
	for (i = 1; i <= NF; i++) {
		name[i] = $i
		if (substr($i, 1, 1) != "_") keep[++k] = i
		if ($i == "amount") a = i
		if ($i == "status") s = i
	}
}
{
	line = ""
	for (j = 1; j <= k; j++) line = line (j > 1 ? OFS : "") $(keep[j])
	print line > "out/clean.csv"
}
NR > 1 {
	rows++
	if ($s == "paid") paid += $a
	if ($s == "refunded") refunded++
}
END {
	rate = rows ? refunded / rows : 0
	printf "{\"rows\": %d, \"paid_revenue\": %.2f, \"refund_rate\": %.4f}\n", rows, paid, rate > "out/result.json"
}' in/export.csv
echo "cleaned $(wc -l < out/clean.csv) lines"
