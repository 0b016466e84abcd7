package app

import (
	"context"
	"io"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/moenda/moenda/adapters/topology"
	"github.com/moenda/moenda/app/asyncapi"
)

// asyncAPI derives the AsyncAPI document from the enabled plugins and
// top, the sources of the catalog, so the two always agree.
func (c *Resolved) asyncAPI(top *topology.Topology) (*asyncapi.Document, error) {
	in := asyncapi.Input{Env: c.Env, Version: binaryVersion(), Topology: top}
	for _, p := range c.plugins {
		in.Plugins = append(in.Plugins, p.def)
	}
	for _, q := range c.Topology.Queues {
		in.ExternalQueues = append(in.ExternalQueues, q.Name)
	}
	if c.Broker.Kind == BrokerAMQP {
		in.RabbitMQ = c.AMQP.Nodes()
	}
	if c.usesKafka() {
		in.Kafka = &asyncapi.Kafka{Brokers: c.Kafka.Brokers, Embedded: c.Kafka.Embedded, TopicPrefix: c.Kafka.TopicPrefix}
	}
	return asyncapi.Build(in)
}

// binaryVersion is the module version the binary was built from, or
// "devel" for a build from a work tree.
func binaryVersion() string {
	if info, ok := debug.ReadBuildInfo(); ok && info.Main.Version != "" && info.Main.Version != "(devel)" {
		return info.Main.Version
	}
	return "devel"
}

// asyncAPICommand is `asyncapi [--yaml]`.
func (c *cli) asyncAPICommand() *cobra.Command {
	asYAML := false
	cmd := c.command("asyncapi", "print the AsyncAPI 3.0 document of the enabled plugins' events (JSON, or YAML with --yaml)",
		func(_ context.Context, cfg *Resolved, stdout, _ io.Writer) error {
			top, err := cfg.BuildTopology()
			if err != nil {
				return err
			}
			doc, err := cfg.asyncAPI(top)
			if err != nil {
				return err
			}
			out, err := doc.JSON()
			if asYAML && err == nil {
				out, err = doc.YAML()
			}
			if err != nil {
				return err
			}
			_, err = stdout.Write(out)
			return err
		})
	cmd.Long = `Print the AsyncAPI 3.0 document of this environment: its brokers, a
channel for each exchange and routing key and for each queue, what each
plugin publishes and consumes, and each event's headers and payload
schema, with the retry and dead-letter queues in x-moenda. It is built
from the enabled plugins and the topology, as GET /v1/asyncapi.json
serves it; nothing is connected to.`
	cmd.Flags().BoolVar(&asYAML, "yaml", false, "print YAML instead of JSON")
	return cmd
}
