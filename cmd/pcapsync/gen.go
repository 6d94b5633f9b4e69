package main

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"time"

	"github.com/pcapsync/pcapsync/internal/gen"
)

func runGen(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || (args[0] != "file" && args[0] != "udp" && args[0] != "certs") {
		return fmt.Errorf("%w: gen file|udp|certs [flags]", errUsage)
	}
	switch args[0] {
	case "certs":
		return runGenCerts(args[1:], stdout, stderr)
	case "file":
		fs := newFlagSet("gen file", "pcapsync gen file --out FILE [--count N] [--mix 64|imix|mixed] [--text] [--ns] [--raw]", stderr)
		out := fs.String("out", "", "pcap file to write (required)")
		var c gen.FileConfig
		fs.Uint64Var(&c.Count, "count", 1000, "packets")
		mix := fs.String("mix", "imix", "frame sizes: 64, imix (64/576/1500 at 7:4:1) or mixed (64-1514, 9000, 65535)")
		fs.BoolVar(&c.Nanosecond, "ns", false, "nanosecond timestamps (default microsecond)")
		fs.BoolVar(&c.Text, "text", false, "payloads of HTTP and JSON log text (compressible) instead of pseudo-random bytes")
		raw := fs.Bool("raw", false, "raw IPv4 frames (link type 101) instead of Ethernet")
		stream := fs.Uint("stream", 1, "stream id written into every payload")
		if err := parseFlags(fs, args[1:]); err != nil {
			return err
		}
		if *out == "" {
			return fmt.Errorf("%w: gen file needs --out", errUsage)
		}
		c.Mix, c.Stream = gen.Mix(*mix), uint32(*stream)
		if *raw {
			c.LinkType = gen.LinkTypeRaw
		}
		if err := gen.WriteFile(*out, c); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "wrote %d packets to %s\n", c.Count, *out)
	case "udp":
		fs := newFlagSet("gen udp", "pcapsync gen udp --to HOST:PORT [--count N] [--seconds S] [--rate PPS] [--mix 64|imix | --size BYTES]", stderr)
		to := fs.String("to", "", "destination IP:PORT (required)")
		var c gen.UDPConfig
		fs.Uint64Var(&c.Count, "count", 1000, "datagrams; 0 is no limit (with --seconds)")
		secs := fs.Float64("seconds", 0, "stop after this long; 0 is no limit")
		fs.IntVar(&c.Rate, "rate", 1000, "datagrams per second; 0 is as fast as possible")
		mix := fs.String("mix", "", "frame sizes: 64 or imix (64/576/1500 at 7:4:1, Ethernet frames over IPv4); default: UDP payloads of 18, 100, 512, 1000 and 1472 bytes in turn")
		size := fs.Int("size", 0, "every frame this many bytes (Ethernet over IPv4: UDP payload of size-42 bytes), instead of --mix")
		stream := fs.Uint("stream", 1, "stream id written into every payload")
		if err := parseFlags(fs, args[1:]); err != nil {
			return err
		}
		if *size != 0 && *mix != "" {
			return fmt.Errorf("%w: --size and --mix exclude each other", errUsage)
		}
		if *size != 0 {
			if *size < 42+gen.PayloadHeader || *size > 42+65507 {
				return fmt.Errorf("%w: --size %d out of range %d..%d", errUsage, *size, 42+gen.PayloadHeader, 42+65507)
			}
			c.Sizes = []int{*size - 42}
		}
		if *secs < 0 || (c.Count == 0 && *secs == 0) {
			return fmt.Errorf("%w: give --count, --seconds or both", errUsage)
		}
		c.Duration = time.Duration(*secs * float64(time.Second))
		if *mix != "" {
			sizes, err := gen.Mix(*mix).UDPSizes()
			if err != nil {
				return fmt.Errorf("%w: --mix: %w", errUsage, err)
			}
			c.Sizes = sizes
		}
		ap, err := netip.ParseAddrPort(*to)
		if err != nil {
			return fmt.Errorf("%w: --to: %w", errUsage, err)
		}
		c.To, c.Stream = ap, uint32(*stream)
		n, err := gen.SendUDP(ctx, c)
		fmt.Fprintf(stdout, "sent %d datagrams to %s\n", n, ap)
		return err
	}
	return nil
}
