package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// PostgresPair is a PostgreSQL primary and a streaming standby started by
// StartPostgresPair: two servers of the machine's PostgreSQL, each on a
// loopback port of its own, with their data under the pair's directory.
type PostgresPair struct {
	logger *slog.Logger
	bin    string
	// as is the user the servers run as: postgres when the caller is
	// root, whom PostgreSQL refuses to run as.
	as *syscall.Credential
	// Primary is the server that takes writes first, Standby the one
	// that follows it and takes over when promoted.
	Primary, Standby *PostgresServer
}

// PostgresServer is one server of a PostgresPair.
type PostgresServer struct {
	Name string
	Port int
	dir  string
}

// URL is a URL of the server alone, to database.
func (s *PostgresServer) URL(database string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", s.Port, database)
}

// URL is the multi-host URL of the pair, to database: a client connects
// to whichever of the two takes writes (target_session_attrs=read-write).
func (p *PostgresPair) URL(database string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/%s?sslmode=disable&target_session_attrs=read-write",
		p.Primary.Port, p.Standby.Port, database)
}

// StartPostgresPair makes a primary under dir, and a standby of it with
// pg_basebackup, streaming from it; with synchronous, a commit on the
// primary returns once the standby has it. The primary is configured as
// moenda's database is (logical WAL, trust from loopback). It returns once
// the standby streams; on an error it stops what it started.
func StartPostgresPair(ctx context.Context, logger *slog.Logger, dir string, synchronous bool) (_ *PostgresPair, err error) {
	bin, err := postgresBin()
	if err != nil {
		return nil, err
	}
	p := &PostgresPair{logger: logger, bin: bin}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("cluster: PostgreSQL will not run as root, and there is no postgres user: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		p.as = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	// The temporary directories above dir (a test's are 0700) must let
	// the postgres user through.
	if p.as != nil {
		tmp := filepath.Clean(os.TempDir()) + string(filepath.Separator)
		for d := filepath.Dir(dir); strings.HasPrefix(d, tmp); d = filepath.Dir(d) {
			if fi, err := os.Stat(d); err == nil && fi.Mode().Perm()&0o001 == 0 {
				if err := os.Chmod(d, fi.Mode().Perm()|0o011); err != nil {
					return nil, fmt.Errorf("cluster: let postgres into %s: %w", d, err)
				}
			}
		}
		if err := os.Chown(dir, int(p.as.Uid), int(p.as.Gid)); err != nil {
			return nil, fmt.Errorf("cluster: %w", err)
		}
	}
	ports, err := FreePorts(2)
	if err != nil {
		return nil, err
	}
	p.Primary = &PostgresServer{Name: "primary", Port: ports[0], dir: filepath.Join(dir, "primary")}
	p.Standby = &PostgresServer{Name: "standby", Port: ports[1], dir: filepath.Join(dir, "standby")}
	defer func() {
		if err != nil {
			p.Close()
		}
	}()
	if _, err := p.run(ctx, "initdb", "-D", p.Primary.dir, "-U", "postgres", "--auth=trust", "--no-sync"); err != nil {
		return nil, err
	}
	sync := ""
	if synchronous {
		sync = "synchronous_standby_names = 'standby'\n"
	}
	conf := fmt.Sprintf(`listen_addresses = '127.0.0.1'
unix_socket_directories = ''
wal_level = logical
max_wal_senders = 10
max_replication_slots = 10
hot_standby = on
fsync = off
%s`, sync)
	if err := p.appendFile(filepath.Join(p.Primary.dir, "postgresql.conf"), conf+fmt.Sprintf("port = %d\n", p.Primary.Port)); err != nil {
		return nil, err
	}
	if err := p.appendFile(filepath.Join(p.Primary.dir, "pg_hba.conf"), "host replication all 127.0.0.1/32 trust\n"); err != nil {
		return nil, err
	}
	if err := p.Start(ctx, p.Primary); err != nil {
		return nil, err
	}
	if _, err := p.run(ctx, "pg_basebackup", "-D", p.Standby.dir, "-R", "-X", "stream", "--no-sync",
		"-d", fmt.Sprintf("host=127.0.0.1 port=%d user=postgres application_name=standby", p.Primary.Port)); err != nil {
		return nil, err
	}
	// The standby's copy of the primary's configuration would have it,
	// once promoted, wait for a standby of its own that there is not.
	if err := p.appendFile(filepath.Join(p.Standby.dir, "postgresql.conf"), fmt.Sprintf("port = %d\nsynchronous_standby_names = ''\n", p.Standby.Port)); err != nil {
		return nil, err
	}
	if err := p.Start(ctx, p.Standby); err != nil {
		return nil, err
	}
	logger.Info("cluster: PostgreSQL pair started", "primary", p.Primary.Port, "standby", p.Standby.Port, "synchronous", synchronous)
	return p, nil
}

// postgresBin is the directory of the newest PostgreSQL server installed
// (Debian's /usr/lib/postgresql/N/bin), or of the initdb on PATH.
func postgresBin() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	initdb, err := exec.LookPath("initdb")
	if err != nil {
		return "", fmt.Errorf("cluster: PostgreSQL's server is not installed (Debian's postgresql package; .ci/services installs it): %w", err)
	}
	return filepath.Dir(initdb), nil
}

// version is the major version in a path /usr/lib/postgresql/N/bin.
func version(bin string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(bin)))
	return n
}

// run runs one of PostgreSQL's programs as the servers' user, and returns
// its output.
func (p *PostgresPair) run(ctx context.Context, program string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(p.bin, program), args...)
	cmd.Env = append(os.Environ(), "LC_ALL=C", "PGCONNECT_TIMEOUT=5")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: p.as}
	cmd.Dir = os.TempDir()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("cluster: %s %s: %w: %s", program, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// appendFile adds text to a file the servers' user owns.
func (p *PostgresPair) appendFile(path, text string) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err == nil {
		_, err = f.WriteString(text)
		err = errors.Join(err, f.Close())
	}
	if err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	return nil
}

// Start starts s and waits until it accepts connections.
func (p *PostgresPair) Start(ctx context.Context, s *PostgresServer) error {
	_, err := p.run(ctx, "pg_ctl", "-D", s.dir, "-l", filepath.Join(s.dir, "server.log"), "-w", "-t", "60", "start")
	return err
}

// Kill stops s at once (pg_ctl stop -m immediate): its processes exit
// without a checkpoint, as in a crash, and what it had not sent its
// standby is the standby's loss.
func (p *PostgresPair) Kill(ctx context.Context, s *PostgresServer) error {
	_, err := p.run(ctx, "pg_ctl", "-D", s.dir, "-m", "immediate", "-w", "stop")
	if err == nil {
		p.logger.Info("cluster: PostgreSQL server killed", "server", s.Name)
	}
	return err
}

// Promote makes the standby a primary, and waits until it takes writes.
func (p *PostgresPair) Promote(ctx context.Context) error {
	_, err := p.run(ctx, "pg_ctl", "-D", p.Standby.dir, "-w", "-t", "60", "promote")
	if err == nil {
		p.logger.Info("cluster: PostgreSQL standby promoted", "port", p.Standby.Port)
	}
	return err
}

// Close stops both servers, whatever their state.
func (p *PostgresPair) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, s := range []*PostgresServer{p.Primary, p.Standby} {
		if s == nil {
			continue
		}
		if _, err := os.Stat(filepath.Join(s.dir, "postmaster.pid")); err != nil {
			continue
		}
		if err := p.Kill(ctx, s); err != nil {
			p.logger.Warn("cluster: stop", "server", s.Name, "err", err)
		}
	}
}
