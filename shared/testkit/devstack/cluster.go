package devstack

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// ClusterOptions configures StartRedisCluster.
type ClusterOptions struct {
	Masters  int  // default 3
	Replicas int  // replicas per master; 1 lets a test kill a master and see failover
	AOF      bool // appendonly yes on every node
}

// Cluster is a local Redis Cluster: one redis-server per node, joined with
// redis-cli --cluster create.
type Cluster struct {
	Nodes []*Redis
}

// clusterNodeTimeout is short so that a killed master fails over in seconds.
const clusterNodeTimeout = 1000 // ms

// StartRedisCluster starts the nodes, creates the cluster and waits until
// every node reports cluster_state:ok.
func StartRedisCluster(opts ClusterOptions) (c *Cluster, err error) {
	if opts.Masters == 0 {
		opts.Masters = 3
	}
	if opts.Masters < 3 {
		return nil, errors.New("devstack: a Redis Cluster needs at least 3 masters")
	}
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		return nil, errors.New("devstack: redis-cli not found in PATH; install it with `apt-get install -y redis-server`")
	}
	c = &Cluster{}
	defer func() {
		if err != nil {
			c.Stop()
		}
	}()
	for i := 0; i < opts.Masters*(1+opts.Replicas); i++ {
		node, err := StartRedis(RedisOptions{AOF: opts.AOF, Args: []string{
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", strconv.Itoa(clusterNodeTimeout),
			"--cluster-require-full-coverage", "no",
			// A replica must finish its first sync before it may take over a
			// dead master; don't let diskless sync wait 5 s to batch replicas.
			"--repl-diskless-sync-delay", "0",
		}})
		if err != nil {
			return c, err
		}
		c.Nodes = append(c.Nodes, node)
	}
	args := []string{"--cluster", "create"}
	for _, n := range c.Nodes {
		args = append(args, n.Addr)
	}
	args = append(args, "--cluster-replicas", strconv.Itoa(opts.Replicas), "--cluster-yes")
	if out, err := exec.Command(cli, args...).CombinedOutput(); err != nil {
		return c, fmt.Errorf("redis-cli --cluster create: %w\n%s", err, out)
	}
	return c, c.WaitOK(30 * time.Second)
}

// URL returns the cluster's REDIS_URL: redis+cluster://host:port,host:port,...
func (c *Cluster) URL() string {
	addrs := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		addrs[i] = n.Addr
	}
	return "redis+cluster://" + strings.Join(addrs, ",")
}

// WaitOK waits until every running node reports cluster_state:ok and agrees
// that every slot is served, and every replica is in sync with its master
// (only then can it take over a master that dies).
func (c *Cluster) WaitOK(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		err := c.ok()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("devstack: redis cluster not ok after %s: %w", timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (c *Cluster) ok() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, n := range c.runningNodes() {
		if err := nodeOK(ctx, n.Addr); err != nil {
			return fmt.Errorf("%s: %w", n.Addr, err)
		}
	}
	return nil
}

// nodeOK reports whether the node at addr serves every slot and, when it is a replica,
// is in sync with its master.
func nodeOK(ctx context.Context, addr string) error {
	rdb := nodeClient(addr)
	defer rdb.Close()
	info, err := rdb.ClusterInfo(ctx).Result()
	if err != nil {
		return err
	}
	if !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_slots_ok:16384") {
		return errors.New("not ok yet")
	}
	repl, err := rdb.Info(ctx, "replication").Result()
	if err != nil {
		return err
	}
	if strings.Contains(repl, "role:slave") && !strings.Contains(repl, "master_link_status:up") {
		return errors.New("replica not in sync yet")
	}
	return nil
}

// MasterOf returns the node that serves key now.
func (c *Cluster) MasterOf(key string) (*Redis, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, n := range c.runningNodes() {
		rdb := nodeClient(n.Addr)
		slot, err := rdb.ClusterKeySlot(ctx, key).Result()
		if err != nil {
			rdb.Close()
			continue
		}
		shards, err := rdb.ClusterShards(ctx).Result()
		rdb.Close()
		if err != nil {
			continue
		}
		if m := c.masterIn(shards, slot); m != nil {
			return m, nil
		}
	}
	return nil, fmt.Errorf("devstack: no master found for %q", key)
}

// masterIn returns the node that shards name as the online master of slot, or nil.
func (c *Cluster) masterIn(shards []redis.ClusterShard, slot int64) *Redis {
	for _, sh := range shards {
		if !servesSlot(sh.Slots, slot) {
			continue
		}
		for _, sn := range sh.Nodes {
			if sn.Role != "master" || sn.Health != "online" {
				continue
			}
			addr := fmt.Sprintf("%s:%d", sn.IP, sn.Port)
			for _, node := range c.Nodes {
				if node.Addr == addr {
					return node
				}
			}
		}
	}
	return nil
}

// runningNodes returns the nodes whose process is up; a killed node cannot answer.
func (c *Cluster) runningNodes() []*Redis {
	var up []*Redis
	for _, n := range c.Nodes {
		if n.running() {
			up = append(up, n)
		}
	}
	return up
}

// nodeClient returns a client for one node that does not retry, so a dead node fails
// fast.
func nodeClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
}

func servesSlot(ranges []redis.SlotRange, slot int64) bool {
	for _, r := range ranges {
		if r.Start <= slot && slot <= r.End {
			return true
		}
	}
	return false
}

// Stop stops every node and removes their data.
func (c *Cluster) Stop() {
	for _, n := range c.Nodes {
		n.Stop()
	}
}
