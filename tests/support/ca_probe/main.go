// ca_probe stands in for a credential-provider plugin (the ECR, GCR and ACR plugins are Go
// programs): run in the image's files with an empty environment, as the controller runs a
// plugin, it verifies the certificate in the file it is given against the roots Go's
// crypto/x509 finds on the system, and says "verified" or why not. tests/image.rs builds and
// runs it.
package main

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: ca_probe CERT.pem")
		os.Exit(2)
	}
	data, err := os.ReadFile(os.Args[1])
	if err != nil {
		fmt.Println("cannot read the certificate:", err)
		os.Exit(1)
	}
	block, _ := pem.Decode(data)
	if block == nil {
		fmt.Println("no PEM block in the certificate file")
		os.Exit(1)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		fmt.Println("cannot parse the certificate:", err)
		os.Exit(1)
	}
	// Roots left nil: the system's, as a plugin's TLS client uses them.
	if _, err := cert.Verify(x509.VerifyOptions{}); err != nil {
		fmt.Println("not verified:", err)
		os.Exit(1)
	}
	fmt.Println("verified")
}
