package main

import (
	"fmt"
	"html"
	"io"
	"math"
)

// The chart: for the batch of 1000 records, time per record (encode
// into a reused buffer, decode pooled or allocating; log scale) and
// bytes on the wire per record, one row per codec. Plain SVG, no
// plotting dependency.

const (
	chartW    = 1000
	labelW    = 150
	panelW    = 340
	panelGap  = 40
	rowH      = 34
	barH      = 12
	topMargin = 70
)

type series struct {
	name, color string
	value       func(codec string) (float64, bool)
}

type axis struct {
	pos   func(v float64) float64 // value -> 0..1
	ticks []float64
	label func(v float64) string
}

func writeChart(w io.Writer, r *results) {
	codecs := r.level("Codec", batch+"/", 1)
	h := topMargin + rowH*len(codecs) + 50
	fmt.Fprintf(w, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", chartW, h)
	fmt.Fprintf(w, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(w, `<text x="10" y="22" font-size="15" font-weight="bold">Batch of 1000 realistic packet records: time and bytes per record by codec (medians, see REPORT.md)</text>`+"\n")

	perRec := func(op string) func(string) (float64, bool) {
		return func(c string) (float64, bool) {
			v, ok := r.nsOp(batch, c, op)
			return v / 1000, ok
		}
	}
	decode := func(c string) (float64, bool) { v, _ := r.decodeBest(batch, c); return v / 1000, v > 0 }
	timeSeries := []series{
		{"encode, reused buffer", "#1f77b4", perRec("encode-reuse")},
		{"decode, pooled (else allocating)", "#ff7f0e", decode},
	}
	maxT := 1.0
	for _, s := range timeSeries {
		for _, c := range codecs {
			if v, ok := s.value(c); ok {
				maxT = max(maxT, v)
			}
		}
	}
	hi := math.Pow(10, math.Ceil(math.Log10(maxT)))
	lo := 1.0
	logAxis := axis{
		pos: func(v float64) float64 {
			return (math.Log10(max(v, lo)) - math.Log10(lo)) / (math.Log10(hi) - math.Log10(lo))
		},
		label: func(v float64) string { return dur(v) },
	}
	for t := lo; t <= hi; t *= 10 {
		logAxis.ticks = append(logAxis.ticks, t)
	}
	x0 := float64(labelW)
	panel(w, x0, "time per record (log scale)", codecs, timeSeries, logAxis, dur)

	overhead := func(c string) (float64, bool) { return r.get(key(batch, c, "encode"), "overhead-B/rec") }
	bytesSeries := []series{{"bytes per record beyond the packet data", "#2ca02c", func(c string) (float64, bool) {
		v, ok := overhead(c)
		return max(v, 0), ok
	}}}
	maxB := 1.0
	for _, c := range codecs {
		if v, ok := bytesSeries[0].value(c); ok {
			maxB = max(maxB, v)
		}
	}
	step := math.Pow(10, math.Floor(math.Log10(maxB)))
	top := math.Ceil(maxB/step) * step
	linAxis := axis{pos: func(v float64) float64 { return v / top }, label: func(v float64) string { return fmt.Sprintf("%.0f B", v) }}
	for t := 0.0; t <= top; t += step {
		linAxis.ticks = append(linAxis.ticks, t)
	}
	x1 := x0 + panelW + panelGap + 60
	panel(w, x1, "bytes per record beyond packet data (mean packet "+meanPacket(r)+")", codecs, bytesSeries, linAxis, func(v float64) string { return fmt.Sprintf("%.1f", v) })
	// A negative overhead (a codec that compresses) is drawn as no bar;
	// say so beside it.
	for i, c := range codecs {
		if v, ok := overhead(c); ok && v < 0 {
			y := topMargin + i*rowH + 4 + barH/2 + barH - 2
			fmt.Fprintf(w, `<text x="%.1f" y="%d" font-size="10">%.1f: compresses the packets too</text>`+"\n", x1+4, y, v)
		}
	}
	for i, c := range codecs {
		y := topMargin + i*rowH + rowH/2 + 4
		fmt.Fprintf(w, `<text x="%d" y="%d" text-anchor="end">%s</text>`+"\n", labelW-8, y, html.EscapeString(c))
	}
	fmt.Fprintln(w, "</svg>")
}

// panel draws one set of horizontal bars, one row per codec and one bar
// per series in each row, with its axis and legend.
func panel(w io.Writer, x0 float64, title string, codecs []string, ss []series, ax axis, format func(float64) string) {
	bottom := topMargin + rowH*len(codecs)
	fmt.Fprintf(w, `<text x="%.0f" y="44" font-weight="bold">%s</text>`+"\n", x0, html.EscapeString(title))
	for i, s := range ss {
		lx := x0 + float64(i)*190
		fmt.Fprintf(w, `<rect x="%.0f" y="52" width="10" height="10" fill="%s"/><text x="%.0f" y="61">%s</text>`+"\n", lx, s.color, lx+14, html.EscapeString(s.name))
	}
	for _, t := range ax.ticks {
		x := x0 + ax.pos(t)*panelW
		fmt.Fprintf(w, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ddd"/>`+"\n", x, topMargin, x, bottom)
		fmt.Fprintf(w, `<text x="%.1f" y="%d" text-anchor="middle" fill="#555">%s</text>`+"\n", x, bottom+16, html.EscapeString(ax.label(t)))
	}
	for i, c := range codecs {
		for j, s := range ss {
			v, ok := s.value(c)
			if !ok {
				continue
			}
			y := float64(topMargin+i*rowH+4) + float64(j*(barH+2))
			if len(ss) == 1 {
				y += float64(barH) / 2
			}
			bw := max(ax.pos(v)*panelW, 1)
			fmt.Fprintf(w, `<rect x="%.1f" y="%.1f" width="%.1f" height="%d" fill="%s"/>`+"\n", x0, y, bw, barH, s.color)
			if v > 0 || len(ss) > 1 {
				fmt.Fprintf(w, `<text x="%.1f" y="%.1f" font-size="10">%s</text>`+"\n", x0+bw+3, y+barH-2, html.EscapeString(format(v)))
			}
		}
	}
}
