// Package schemadump writes a database's schema as text, the same text for the same schema: a
// PostgreSQL schema read from the catalog (tables, columns, constraints, indexes, triggers,
// functions with their bodies, sequences, views, types) and an SQLite file's sqlite_schema. It
// makes migrations/postgres/schema.sql and migrations/sqlite/schema.sql (cmd/schemadump), and
// tests compare databases with it.
//
// The PostgreSQL text comes from the catalog's own deparsers (pg_get_functiondef,
// pg_get_constraintdef, pg_get_indexdef …), not from pg_dump, so it does not depend on which
// pg_dump is installed; it is not meant to be run.
package schemadump

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Querier is what Postgres reads through: a *pgx.Conn, a *pgxpool.Pool or a pgx.Tx.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Postgres returns the schema of the connection's current schema (search_path's first,
// normally public).
func Postgres(ctx context.Context, q Querier) (string, error) {
	var b strings.Builder
	for _, part := range []func(context.Context, Querier, *strings.Builder) error{
		pgExtensions, pgTypes, pgSequences, pgFunctions, pgTables, pgViews,
	} {
		if err := part(ctx, q, &b); err != nil {
			return "", err
		}
	}
	return b.String(), nil
}

// rows runs a query and returns its rows as text (NULL as "").
func rows(ctx context.Context, q Querier, query string, args ...any) ([][]string, error) {
	rs, err := q.Query(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("schemadump: %w", err)
	}
	defer rs.Close()
	var out [][]string
	for rs.Next() {
		vals, err := rs.Values()
		if err != nil {
			return nil, fmt.Errorf("schemadump: %w", err)
		}
		row := make([]string, len(vals))
		for i, v := range vals {
			if v != nil {
				row[i] = fmt.Sprint(v)
			}
		}
		out = append(out, row)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("schemadump: %w", err)
	}
	return out, nil
}

// notFromExtension excludes objects that an extension made (their CREATE EXTENSION says them).
const notFromExtension = `NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = %s::regclass AND d.objid = %s AND d.deptype = 'e')`

func pgExtensions(ctx context.Context, q Querier, b *strings.Builder) error {
	rs, err := rows(ctx, q, `SELECT quote_ident(extname) FROM pg_extension WHERE extname <> 'plpgsql' ORDER BY extname`)
	if err != nil {
		return err
	}
	for _, r := range rs {
		fmt.Fprintf(b, "CREATE EXTENSION %s;\n\n", r[0])
	}
	return nil
}

func pgTypes(ctx context.Context, q Querier, b *strings.Builder) error {
	rs, err := rows(ctx, q, `SELECT quote_ident(t.typname), t.typtype::text,
			CASE t.typtype
			WHEN 'e' THEN (SELECT string_agg(quote_literal(e.enumlabel), ', ' ORDER BY e.enumsortorder) FROM pg_enum e WHERE e.enumtypid = t.oid)
			WHEN 'd' THEN format_type(t.typbasetype, t.typtypmod) ||
				CASE WHEN t.typnotnull THEN ' NOT NULL' ELSE '' END ||
				coalesce(' DEFAULT ' || t.typdefault, '') ||
				coalesce((SELECT string_agg(' CONSTRAINT ' || quote_ident(c.conname) || ' ' || pg_get_constraintdef(c.oid), '' ORDER BY c.conname)
					FROM pg_constraint c WHERE c.contypid = t.oid), '')
			WHEN 'c' THEN (SELECT string_agg(quote_ident(a.attname) || ' ' || format_type(a.atttypid, a.atttypmod), ', ' ORDER BY a.attnum)
				FROM pg_attribute a WHERE a.attrelid = t.typrelid AND a.attnum > 0 AND NOT a.attisdropped)
			ELSE '' END
		FROM pg_type t
		WHERE t.typnamespace = current_schema()::regnamespace
		AND (t.typtype IN ('e', 'd') OR t.typtype = 'c' AND (SELECT relkind FROM pg_class WHERE oid = t.typrelid) = 'c')
		AND `+fmt.Sprintf(notFromExtension, "'pg_type'", "t.oid")+`
		ORDER BY t.typname`)
	if err != nil {
		return err
	}
	for _, r := range rs {
		switch r[1] {
		case "e":
			fmt.Fprintf(b, "CREATE TYPE %s AS ENUM (%s);\n\n", r[0], r[2])
		case "d":
			fmt.Fprintf(b, "CREATE DOMAIN %s AS %s;\n\n", r[0], r[2])
		case "c":
			fmt.Fprintf(b, "CREATE TYPE %s AS (%s);\n\n", r[0], r[2])
		}
	}
	return nil
}

// pgSequences lists sequences but those of identity columns (the column says them).
func pgSequences(ctx context.Context, q Querier, b *strings.Builder) error {
	rs, err := rows(ctx, q, `SELECT quote_ident(c.relname), format_type(s.seqtypid, NULL), s.seqstart, s.seqincrement, s.seqmin, s.seqmax, s.seqcache, s.seqcycle,
			coalesce((SELECT quote_ident(t.relname) || '.' || quote_ident(a.attname) FROM pg_depend d
				JOIN pg_class t ON t.oid = d.refobjid JOIN pg_attribute a ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid
				WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid AND d.refclassid = 'pg_class'::regclass AND d.deptype = 'a'), '')
		FROM pg_sequence s JOIN pg_class c ON c.oid = s.seqrelid
		WHERE c.relnamespace = current_schema()::regnamespace
		AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid AND d.deptype = 'i')
		AND `+fmt.Sprintf(notFromExtension, "'pg_class'", "c.oid")+`
		ORDER BY c.relname`)
	if err != nil {
		return err
	}
	for _, r := range rs {
		fmt.Fprintf(b, "CREATE SEQUENCE %s AS %s START %s INCREMENT %s MINVALUE %s MAXVALUE %s CACHE %s", r[0], r[1], r[2], r[3], r[4], r[5], r[6])
		if r[7] == "true" {
			b.WriteString(" CYCLE")
		}
		if r[8] != "" {
			fmt.Fprintf(b, " OWNED BY %s", r[8])
		}
		b.WriteString(";\n\n")
	}
	return nil
}

func pgFunctions(ctx context.Context, q Querier, b *strings.Builder) error {
	rs, err := rows(ctx, q, `SELECT pg_get_functiondef(p.oid)
		FROM pg_proc p
		WHERE p.pronamespace = current_schema()::regnamespace AND p.prokind IN ('f', 'p')
		AND `+fmt.Sprintf(notFromExtension, "'pg_proc'", "p.oid")+`
		ORDER BY p.proname, pg_get_function_identity_arguments(p.oid)`)
	if err != nil {
		return err
	}
	for _, r := range rs {
		fmt.Fprintf(b, "%s;\n\n", strings.TrimRight(r[0], "\n"))
	}
	return nil
}

// pgTables writes each table with its columns and constraints, then its indexes (those no
// constraint made) and its triggers.
func pgTables(ctx context.Context, q Querier, b *strings.Builder) error {
	tables, err := rows(ctx, q, `SELECT c.oid, quote_ident(c.relname), c.relkind::text, c.relpersistence::text, coalesce(array_to_string(c.reloptions, ', '), ''),
			coalesce(pg_get_partkeydef(c.oid), '')
		FROM pg_class c
		WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'p')
		AND `+fmt.Sprintf(notFromExtension, "'pg_class'", "c.oid")+`
		ORDER BY c.relname`)
	if err != nil {
		return err
	}
	for _, t := range tables {
		oid, name := t[0], t[1]
		cols, err := rows(ctx, q, `SELECT quote_ident(a.attname), format_type(a.atttypid, a.atttypmod), a.attnotnull, a.attidentity::text, a.attgenerated::text,
				coalesce(pg_get_expr(d.adbin, d.adrelid), ''),
				CASE WHEN a.attcollation <> 0 AND a.attcollation <> (SELECT typcollation FROM pg_type WHERE oid = a.atttypid)
					THEN (SELECT quote_ident(collname) FROM pg_collation WHERE oid = a.attcollation) ELSE '' END
			FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
			WHERE a.attrelid = $1::oid AND a.attnum > 0 AND NOT a.attisdropped
			ORDER BY a.attnum`, oid)
		if err != nil {
			return err
		}
		cons, err := rows(ctx, q, `SELECT quote_ident(conname), pg_get_constraintdef(oid)
			FROM pg_constraint WHERE conrelid = $1::oid AND contype <> 'n' ORDER BY conname`, oid)
		if err != nil {
			return err
		}
		var lines []string
		for _, c := range cols {
			l := c[0] + " " + c[1]
			if c[6] != "" {
				l += " COLLATE " + c[6]
			}
			switch {
			case c[4] == "s":
				l += " GENERATED ALWAYS AS (" + c[5] + ") STORED"
			case c[3] == "a":
				l += " GENERATED ALWAYS AS IDENTITY"
			case c[3] == "d":
				l += " GENERATED BY DEFAULT AS IDENTITY"
			case c[5] != "":
				l += " DEFAULT " + c[5]
			}
			if c[2] == "true" {
				l += " NOT NULL"
			}
			lines = append(lines, l)
		}
		for _, c := range cons {
			lines = append(lines, "CONSTRAINT "+c[0]+" "+c[1])
		}
		kind := "TABLE"
		if t[3] == "u" {
			kind = "UNLOGGED TABLE"
		}
		fmt.Fprintf(b, "CREATE %s %s (\n\t%s\n)", kind, name, strings.Join(lines, ",\n\t"))
		if t[5] != "" {
			fmt.Fprintf(b, " PARTITION BY %s", t[5])
		}
		if t[4] != "" {
			fmt.Fprintf(b, " WITH (%s)", t[4])
		}
		b.WriteString(";\n")
		more, err := rows(ctx, q, `SELECT pg_get_indexdef(i.indexrelid) FROM pg_index i JOIN pg_class ic ON ic.oid = i.indexrelid
			WHERE i.indrelid = $1::oid AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = i.indexrelid AND c.conrelid = i.indrelid)
			ORDER BY ic.relname`, oid)
		if err != nil {
			return err
		}
		triggers, err := rows(ctx, q, `SELECT pg_get_triggerdef(oid) FROM pg_trigger WHERE tgrelid = $1::oid AND NOT tgisinternal ORDER BY tgname`, oid)
		if err != nil {
			return err
		}
		for _, r := range append(more, triggers...) {
			fmt.Fprintf(b, "%s;\n", r[0])
		}
		b.WriteString("\n")
	}
	return nil
}

func pgViews(ctx context.Context, q Querier, b *strings.Builder) error {
	rs, err := rows(ctx, q, `SELECT quote_ident(c.relname), c.relkind::text, pg_get_viewdef(c.oid, true)
		FROM pg_class c
		WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('v', 'm')
		AND `+fmt.Sprintf(notFromExtension, "'pg_class'", "c.oid")+`
		ORDER BY c.relname`)
	if err != nil {
		return err
	}
	for _, r := range rs {
		kind := "VIEW"
		if r[1] == "m" {
			kind = "MATERIALIZED VIEW"
		}
		fmt.Fprintf(b, "CREATE %s %s AS\n%s\n\n", kind, r[0], strings.TrimRight(r[2], "\n"))
	}
	return nil
}

// SQLite returns the schema of an SQLite database: every CREATE statement of sqlite_schema as
// SQLite keeps it (the text as written, with ALTER TABLE's edits), each table followed by its
// indexes and triggers, tables in name order. SQLite's own tables (sqlite_sequence …) and the
// shadow tables of virtual tables (FTS5's message_search_data …) are left out: the statements
// that made them are there.
func SQLite(ctx context.Context, db *sql.DB) (string, error) {
	rs, err := db.QueryContext(ctx, `SELECT type, name, sql FROM sqlite_schema
		WHERE sql IS NOT NULL AND name NOT LIKE 'sqlite\_%' ESCAPE '\'
		AND name NOT IN (SELECT name FROM pragma_table_list WHERE type = 'shadow')
		ORDER BY tbl_name, CASE type WHEN 'table' THEN 0 WHEN 'view' THEN 0 WHEN 'index' THEN 1 ELSE 2 END, name`)
	if err != nil {
		return "", fmt.Errorf("schemadump: %w", err)
	}
	defer rs.Close()
	var b strings.Builder
	last := ""
	for rs.Next() {
		var typ, name, text string
		if err := rs.Scan(&typ, &name, &text); err != nil {
			return "", fmt.Errorf("schemadump: %w", err)
		}
		if (typ == "table" || typ == "view") && last != "" {
			b.WriteString("\n")
		}
		last = name
		fmt.Fprintf(&b, "%s;\n", text)
	}
	if err := rs.Err(); err != nil {
		return "", fmt.Errorf("schemadump: %w", err)
	}
	return b.String(), nil
}
