// Command htpasswd prints one line of an htpasswd file, `USER:BCRYPT`, for the user named by
// its one argument and the password read from standard input (up to the first newline), so
// the password never appears in a process list. The node tests' private registry reads the
// file; distribution's htpasswd backend accepts bcrypt only.
package main

import (
	"bufio"
	"fmt"
	"os"
	"strings"

	"golang.org/x/crypto/bcrypt"
)

func main() {
	if len(os.Args) != 2 || os.Args[1] == "" || strings.ContainsAny(os.Args[1], ":\n") {
		fmt.Fprintln(os.Stderr, "usage: htpasswd USER < password (USER without ':' or newline)")
		os.Exit(2)
	}
	password, err := bufio.NewReader(os.Stdin).ReadString('\n')
	if err != nil && password == "" {
		fmt.Fprintln(os.Stderr, "htpasswd: no password on standard input")
		os.Exit(2)
	}
	password = strings.TrimSuffix(password, "\n")
	// The lowest cost bcrypt allows: the registry checks the hash on every request.
	hash, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.MinCost)
	if err != nil {
		fmt.Fprintln(os.Stderr, "htpasswd:", err)
		os.Exit(1)
	}
	fmt.Printf("%s:%s\n", os.Args[1], hash)
}
