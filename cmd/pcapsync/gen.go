package main

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/pcapsync/pcapsync/internal/gen"
)

func genCommand(s streams) *cobra.Command {
	return group("gen", "generate test inputs, certificates, agents' Kafka record keys and manual pages",
		genFileCommand(s), genUDPCommand(s), genCertsCommand(s), genAgentKeyCommand(s), genManCommand(s))
}

func genFileCommand(s streams) *cobra.Command {
	return leaf("file --out FILE [--count N] [--mix 64|imix|mixed] [--text] [--ns] [--raw]", "write a pcap file of generated packets",
		"Writes a pcap file of generated UDP packets whose payloads carry a stream id and a sequence number.", noArgs, func(fs *pflag.FlagSet) runFunc {
			out := fs.String("out", "", "pcap file to write (required)")
			var c gen.FileConfig
			fs.Uint64Var(&c.Count, "count", 1000, "packets")
			mix := fs.String("mix", "imix", "frame sizes: 64, imix (64/576/1500 at 7:4:1) or mixed (64-1514, 9000, 65535)")
			fs.BoolVar(&c.Nanosecond, "ns", false, "nanosecond timestamps (default microsecond)")
			fs.BoolVar(&c.Text, "text", false, "payloads of HTTP and JSON log text (compressible) instead of pseudo-random bytes")
			raw := fs.Bool("raw", false, "raw IPv4 frames (link type 101) instead of Ethernet")
			stream := fs.Uint("stream", 1, "stream id written into every payload")
			return func(ctx context.Context, _ []string) error {
				if *out == "" {
					return usageError("gen file needs --out")
				}
				c.Mix, c.Stream = gen.Mix(*mix), uint32(*stream)
				if *raw {
					c.LinkType = gen.LinkTypeRaw
				}
				if err := gen.WriteFile(*out, c); err != nil {
					return err
				}
				fmt.Fprintf(s.stdout, "wrote %d packets to %s\n", c.Count, *out)
				return nil
			}
		})
}

func genUDPCommand(s streams) *cobra.Command {
	return leaf("udp --to HOST:PORT [--count N] [--seconds S] [--rate PPS] [--mix 64|imix | --size BYTES]", "send generated UDP datagrams",
		"Sends UDP datagrams whose payloads carry a stream id and a sequence number, for capture tests.", noArgs, func(fs *pflag.FlagSet) runFunc {
			to := fs.String("to", "", "destination IP:PORT (required)")
			var c gen.UDPConfig
			fs.Uint64Var(&c.Count, "count", 1000, "datagrams; 0 is no limit (with --seconds)")
			secs := fs.Float64("seconds", 0, "stop after this long; 0 is no limit")
			fs.IntVar(&c.Rate, "rate", 1000, "datagrams per second; 0 is as fast as possible")
			mix := fs.String("mix", "", "frame sizes: 64 or imix (64/576/1500 at 7:4:1, Ethernet frames over IPv4); default: UDP payloads of 18, 100, 512, 1000 and 1472 bytes in turn")
			size := fs.Int("size", 0, "every frame this many bytes (Ethernet over IPv4: UDP payload of size-42 bytes), instead of --mix")
			stream := fs.Uint("stream", 1, "stream id written into every payload")
			return func(ctx context.Context, _ []string) error {
				if err := udpSizes(&c, *mix, *size); err != nil {
					return err
				}
				if *secs < 0 || (c.Count == 0 && *secs == 0) {
					return usageError("give --count, --seconds or both")
				}
				c.Duration = time.Duration(*secs * float64(time.Second))
				ap, err := netip.ParseAddrPort(*to)
				if err != nil {
					return usageError("--to: %v", err)
				}
				c.To, c.Stream = ap, uint32(*stream)
				n, err := gen.SendUDP(ctx, c)
				fmt.Fprintf(s.stdout, "sent %d datagrams to %s\n", n, ap)
				return err
			}
		})
}

// udpSizes sets c.Sizes from gen udp's --mix or --size.
func udpSizes(c *gen.UDPConfig, mix string, size int) error {
	switch {
	case size != 0 && mix != "":
		return usageError("--size and --mix exclude each other")
	case size != 0:
		if size < 42+gen.PayloadHeader || size > 42+65507 {
			return usageError("--size %d out of range %d..%d", size, 42+gen.PayloadHeader, 42+65507)
		}
		c.Sizes = []int{size - 42}
	case mix != "":
		sizes, err := gen.Mix(mix).UDPSizes()
		if err != nil {
			return usageError("--mix: %v", err)
		}
		c.Sizes = sizes
	}
	return nil
}

func genManCommand(s streams) *cobra.Command {
	var dir string
	c := leaf("man --dir DIR", "write a manual page per command (section 1)",
		"Writes pcapsync.1, pcapsync-agent.1 and so on for every command into DIR, from the same definitions as --help.", noArgs, func(fs *pflag.FlagSet) runFunc {
			fs.StringVar(&dir, "dir", "", "directory to write the pages to, created if missing (required)")
			return nil
		})
	c.RunE = func(c *cobra.Command, _ []string) error {
		if dir == "" {
			return usageError("gen man needs --dir")
		}
		return writeManPages(c.Root(), dir, s.stdout)
	}
	return c
}
