#!/usr/bin/env bash
# progress: run a long command so that nobody stares at a silent terminal.
# Its output (stdout and stderr, merged) passes through as it comes; when
# nothing was printed for INTERVAL seconds, one line says what is running
# and for how long. Lines matching COUNT (e.g. the package paths `go build
# -v` prints) are counted into that line instead, and hidden with -h.
# Those progress lines go to stderr, so the command's output alone can be
# redirected to a file while the terminal still shows progress.
#
#   hack/progress.sh [-i INTERVAL] [-c REGEX -n NOUN [-h]] -w WHAT -- command [args...]
#
# The exit status is the command's.
set -uo pipefail

interval=30
count=''
noun='lines'
hide=0
what=''
while getopts 'i:c:n:hw:' opt; do
	case $opt in
	i) interval=$OPTARG ;;
	c) count=$OPTARG ;;
	n) noun=$OPTARG ;;
	h) hide=1 ;;
	w) what=$OPTARG ;;
	*)
		echo "usage: $0 [-i INTERVAL] [-c REGEX -n NOUN [-h]] -w WHAT -- command [args...]" >&2
		exit 2
		;;
	esac
done
shift $((OPTIND - 1))
if [ $# -eq 0 ] || [ -z "$what" ]; then
	echo "usage: $0 [-i INTERVAL] [-c REGEX -n NOUN [-h]] -w WHAT -- command [args...]" >&2
	exit 2
fi

start=$SECONDS
elapsed() {
	local s=$((SECONDS - start))
	printf '%dm%02ds' $((s / 60)) $((s % 60))
}

"$@" 2>&1 | {
	n=0
	last=$SECONDS
	partial='' # what a read that timed out got of a line
	while :; do
		if IFS= read -r -t 1 chunk; then
			line=$partial$chunk
			partial=''
			if [ -n "$count" ] && [[ $line =~ $count ]]; then
				n=$((n + 1))
				[ $hide -eq 1 ] && continue
			fi
			printf '%s\n' "$line"
			last=$SECONDS
		elif [ $? -gt 128 ]; then
			partial+=$chunk
		else
			# End of output; a last line without a newline is printed.
			[ -n "$partial$chunk" ] && printf '%s\n' "$partial$chunk"
			break
		fi
		if [ $((SECONDS - last)) -ge "$interval" ]; then
			if [ -n "$count" ]; then
				echo "   ... $what: $n $noun, $(elapsed) so far" >&2
			else
				echo "   ... $what: $(elapsed) so far" >&2
			fi
			last=$SECONDS
		fi
	done
	if [ -n "$count" ]; then
		echo "   ... $what: $n $noun in $(elapsed)" >&2
	fi
}
exit "${PIPESTATUS[0]}"
