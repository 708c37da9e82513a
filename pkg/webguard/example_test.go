package webguard_test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"strings"

	"github.com/graphorin/graphorin-go/pkg/contracts"
	"github.com/graphorin/graphorin-go/pkg/webguard"
)

// A surface gets the guards and a login by wrapping its handler: here an
// approver of TENANT_A logs in with its token and the page knows who it
// is.
func Example() {
	sum := sha256.Sum256([]byte("s3cret-token"))
	th, _ := webguard.ParseTokenHash(hex.EncodeToString(sum[:]), contracts.Identity{Tenant: "TENANT_A", Principal: "approver-a"})
	key, _, _ := webguard.LoadKey("") // a key for this process
	sessions, _ := webguard.NewSessions(key, webguard.SessionConfig{})
	login := &webguard.Login{Sessions: sessions, Methods: []webguard.Method{{Name: "token", Label: "Log in", Prompt: "Your token",
		Auth: &webguard.TokenAuthenticator{Tokens: func() []webguard.TokenHash { return []webguard.TokenHash{th} }}}}}
	page := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sess, _ := webguard.SessionFrom(r.Context())
		fmt.Fprintf(w, "hello %s", sess.Identity)
	})

	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	srv := &http.Server{Handler: webguard.Guard{Addr: ln.Addr().String()}.Handler(login.Handler(page))}
	go srv.Serve(ln)
	defer srv.Close()
	base := "http://" + ln.Addr().String()

	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar}
	resp, _ := c.Get(base + "/api/data")
	fmt.Println("before:", resp.StatusCode)
	resp.Body.Close()
	resp, _ = c.Post(base+"/auth/token", "application/json", strings.NewReader(`{"token":"s3cret-token"}`))
	resp.Body.Close()
	resp, _ = c.Get(base + "/api/data")
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Println("after:", string(body))
	// Output:
	// before: 401
	// after: hello TENANT_A/approver-a
}
