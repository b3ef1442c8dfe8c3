// Command k6 is the upstream k6 CLI with swarmscope's output compiled in (what xk6 generates
// for an output extension: k6's own main, plus a blank import that registers the extension).
//
//	tools/build_k6.sh --swarmscope   # builds this, cached by k6's version and the source's hash
package main

import (
	"go.k6.io/k6/cmd"

	_ "swarmscope.dev/k6out"
)

func main() {
	cmd.Execute()
}
