#!/usr/bin/env bash
# Regenerates the golden files made by Wireshark's tools from the captures in captures/:
#   tshark/<capture-stem>.tsv  frame, BTH opcode, destination QP, PSN of every frame
#                              tshark decodes as InfiniBand (RoCEv2), all in decimal
#   frames.tsv                 per capture: all frames, and frames decoded as InfiniBand
#   converted/rping.pcapng     captures/rping.pcap rewritten by editcap as pcapng (with a
#                              capture comment and a frame comment) and as nanosecond pcap,
#   converted/rping.nsec.pcap  to test the reader on other formats written by a real tool
# Needs tshark and editcap (made with 4.0.17; see README.md). Run from anywhere; it rewrites
# the files in place. A different Wireshark version may dissect differently: diff the result.
set -euo pipefail
cd "$(dirname "$0")"
export LC_ALL=C

for tool in tshark editcap; do
    command -v "$tool" >/dev/null || { echo "regen-tshark.sh: $tool not found" >&2; exit 1; }
done

mkdir -p tshark
frames_tmp=$(mktemp)
trap 'rm -f "$frames_tmp"' EXIT
printf 'capture\tframes\tinfiniband\n' >"$frames_tmp"

shopt -s nullglob
captures=(captures/*.pcap captures/*.pcapng)
[ ${#captures[@]} -gt 0 ] || { echo "regen-tshark.sh: no captures in captures/" >&2; exit 1; }

for cap in "${captures[@]}"; do
    name=$(basename "$cap")
    stem=${name%.*}
    out=tshark/$stem.tsv
    # UDP port 4791 is dissected as RoCEv2 ("infiniband") by default in tshark 4.0.
    # destqp is printed in hex (0x000abc); the loop turns every field into decimal.
    tshark -r "$cap" -Y 'infiniband' -T fields \
        -e frame.number -e infiniband.bth.opcode -e infiniband.bth.destqp -e infiniband.bth.psn \
        -E separator=/t -E occurrence=f 2>/dev/null |
    {
        printf 'frame\topcode\tdqpn\tpsn\n'
        while IFS=$'\t' read -r frame opcode dqpn psn; do
            if [ -z "$frame" ] || [ -z "$opcode" ] || [ -z "$dqpn" ] || [ -z "$psn" ]; then
                echo "regen-tshark.sh: $cap frame $frame: InfiniBand without a full BTH" >&2
                exit 1
            fi
            printf '%d\t%d\t%d\t%d\n' "$frame" "$opcode" "$dqpn" "$psn"
        done
    } >"$out.tmp"
    mv "$out.tmp" "$out"

    total=$(tshark -r "$cap" -T fields -e frame.number 2>/dev/null | wc -l)
    ib=$(($(wc -l <"$out") - 1))
    printf '%s\t%d\t%d\n' "$name" "$total" "$ib" >>"$frames_tmp"
    echo "$name: $total frames, $ib InfiniBand" >&2
done

chmod 644 "$frames_tmp"
mv "$frames_tmp" frames.tsv
trap - EXIT

mkdir -p converted
editcap -F pcapng -a '3:rxe test comment' --capture-comment 'converted by editcap for rxe tests' \
    captures/rping.pcap converted/rping.pcapng 2>/dev/null
editcap -F nsecpcap captures/rping.pcap converted/rping.nsec.pcap 2>/dev/null
