package app

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"parley/internal/auth"
	"parley/internal/fault"
	"parley/internal/store"
	"parley/internal/store/pgstore"
)

const usage = `usage:
  web [serve]                                   serve the app
  web migrate                                   apply the store's migrations and exit
  web user add --name N --role member|reviewer|admin --password-stdin
                                                create a user; the password is a line on stdin
  web token create --user N [--label L]         print a new API token for that user, once
  web audit verify [--anchor FILE]...           walk the audit trail's keyed hash chain and check it
                                                against its anchors: exit 0 when intact, 1 naming the
                                                first record changed, missing or cut off
  web audit export [--out FILE]                 write the audit trail as JSON Lines, in chain order
  web healthcheck                               GET /healthz on PARLEY_ADDR; exit 0 when healthy
                                                (the Docker HEALTHCHECK: the image has no curl)
Configuration comes from environment variables: docs/configuration.md lists
every one with its default and meaning.
`

// IO is where a command reads and writes.
type IO struct {
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
}

// Main runs the command in args (without the program name) and returns the exit status. Every
// failure is one line on stderr ("web: …"), never a stack trace.
func Main(ctx context.Context, args []string, getenv func(string) string, std IO) int {
	if err := run(ctx, args, getenv, std); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 2
		}
		fmt.Fprintln(std.Stderr, "web: "+oneLine(err.Error()))
		return 1
	}
	return 0
}

// oneLine folds a multi-line error (a tools file's list of problems excepted: its lines are
// the point) into one line.
func oneLine(s string) string {
	if strings.Contains(s, "\n  ") {
		return s
	}
	return strings.ReplaceAll(strings.TrimSpace(s), "\n", "; ")
}

func run(ctx context.Context, args []string, getenv func(string) string, std IO) error {
	cmd := "serve"
	if len(args) > 0 {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "help", "-h", "--help":
		fmt.Fprint(std.Stdout, usage)
		return nil
	case "healthcheck":
		// Only PARLEY_ADDR matters here: a probe must not fail on unrelated configuration.
		if len(args) > 0 {
			return fmt.Errorf("healthcheck takes no arguments")
		}
		return Healthcheck(ctx, orDefault(listed(getenv)("PARLEY_ADDR"), "127.0.0.1:8080"), healthcheckTimeout)
	}
	cfg, err := FromEnv(getenv)
	if err != nil {
		return err
	}
	log := NewLogger(cfg.Production, std.Stderr)
	switch {
	case cmd == "serve" && len(args) == 0:
		a, err := New(ctx, cfg, Options{Logger: log, Console: std.Stdout})
		if err != nil {
			return err
		}
		fmt.Fprintf(std.Stdout, "parley listening on %s\n", a.URL())
		return a.Run(ctx)
	case cmd == "migrate" && len(args) == 0:
		if cfg.DatabaseURL != "" {
			err = pgstore.Migrate(ctx, cfg.DatabaseURL)
		} else {
			var st store.Store
			if st, err = OpenStore(ctx, cfg, log); err == nil {
				err = st.Close()
			}
		}
		if err != nil {
			return err
		}
		fmt.Fprintln(std.Stdout, "migrations applied")
		return nil
	case cmd == "user" && len(args) > 0 && args[0] == "add":
		return userAdd(ctx, cfg, args[1:], std)
	case cmd == "token" && len(args) > 0 && args[0] == "create":
		return tokenCreate(ctx, cfg, args[1:], std)
	case cmd == "audit" && len(args) > 0 && args[0] == "verify":
		return auditVerify(ctx, cfg, log, args[1:], std)
	case cmd == "audit" && len(args) > 0 && args[0] == "export":
		return auditExport(ctx, cfg, log, args[1:], std)
	}
	fmt.Fprint(std.Stderr, usage)
	return fmt.Errorf("unknown command %q", strings.Join(append([]string{cmd}, args...), " "))
}

func newFlags(name string, std IO) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(std.Stderr)
	return fs
}

// userAdd: web user add --name N --role R --password-stdin.
func userAdd(ctx context.Context, cfg Config, args []string, std IO) error {
	fs := newFlags("user add", std)
	name := fs.String("name", "", "the user's name")
	role := fs.String("role", "member", "member, reviewer or admin")
	fromStdin := fs.Bool("password-stdin", false, "read the password from the first line of standard input")
	if err := fs.Parse(args); err != nil {
		return err
	}
	r, err := auth.ParseRole(*role)
	if err != nil {
		return fmt.Errorf("--role must be member, reviewer or admin, not %q", *role)
	}
	if *name == "" {
		return errors.New("--name is required")
	}
	if !*fromStdin {
		return errors.New("pass the password on standard input with --password-stdin (never on the command line)")
	}
	line, err := bufio.NewReader(std.Stdin).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("read password: %w", err)
	}
	u, err := auth.NewUser(time.Now(), *name, r, strings.TrimRight(line, "\r\n"), 0)
	if errors.Is(err, auth.ErrBadName) {
		return fmt.Errorf("--name: %w", err)
	}
	if err != nil {
		return err
	}
	st, err := OpenStore(ctx, cfg, nil)
	if err != nil {
		return err
	}
	defer st.Close()
	u, err = st.CreateUser(ctx, u)
	if errors.Is(err, store.ErrConflict) {
		return fmt.Errorf("a user named %q exists already", *name)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(std.Stdout, "created user %s (%s, id %s)\n", u.Name, u.Role, u.ID)
	return nil
}

// tokenCreate: web token create --user N; prints the token, which is stored only as a hash.
func tokenCreate(ctx context.Context, cfg Config, args []string, std IO) error {
	fs := newFlags("token create", std)
	name := fs.String("user", "", "the user the token acts as")
	label := fs.String("label", "cli", "a name for the token, shown on the tokens page")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *name == "" {
		return errors.New("--user is required")
	}
	st, err := OpenStore(ctx, cfg, nil)
	if err != nil {
		return err
	}
	defer st.Close()
	u, err := st.UserByName(ctx, *name)
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("no user named %q", *name)
	}
	if err != nil {
		return err
	}
	secret, _, err := auth.CreateToken(ctx, st, time.Now(), auth.TokenSpec{UserID: u.ID, Label: *label})
	var refused *fault.Error
	if errors.As(err, &refused) && refused.Kind == fault.KindInvalidArgs {
		return fmt.Errorf("--label: %s", refused.Message)
	}
	if err != nil {
		return err
	}
	fmt.Fprintln(std.Stdout, secret)
	return nil
}
