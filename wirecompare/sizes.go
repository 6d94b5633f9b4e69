package wirecompare

import "strconv"

// Workload is a batch the codecs encode: one record of a fixed size, or
// the batch of realistic records.
type Workload struct {
	Name  string
	Batch Batch
}

// BatchRecords is the size of the realistic batch.
const BatchRecords = 1000

// FixedSizes are the single-record sizes of the reference write-up.
var FixedSizes = []int{72, 1024, 16384}

// Workloads returns the single records of FixedSizes and a batch of
// BatchRecords Mixed records, named "72", "1024", "16384" and "batch".
func Workloads() []Workload {
	var w []Workload
	for _, n := range FixedSizes {
		w = append(w, Workload{Name: strconv.Itoa(n), Batch: Fixed(n)})
	}
	b, err := Generate(Mixed, BatchRecords, 1)
	if err != nil {
		panic(err) // Mixed is a known kind
	}
	return append(w, Workload{Name: "batch", Batch: b})
}
