"""The SQL migration files, their parsing, and their agreement with delayq.tables, without a database."""
from __future__ import annotations

import re

import pytest

from delayq import tables
from delayq.schema import SQL_DIR, Migration, migrations, split_statements

CREATE_RE = re.compile(r"^CREATE TABLE IF NOT EXISTS (\w+) \((.*)\)[^()]*$", re.S)
NOT_COLUMNS = {"KEY", "PRIMARY", "UNIQUE", "INDEX", "CONSTRAINT", "FOREIGN", "FULLTEXT"}


def create_statements() -> dict[str, str]:
    """Table name -> its CREATE TABLE statement, over every migration."""
    found: dict[str, str] = {}
    for mig in migrations():
        for stmt in mig.statements:
            m = CREATE_RE.match(stmt)
            if m:
                assert m.group(1) not in found, f"table {m.group(1)} created twice"
                found[m.group(1)] = stmt
    return found


def column_lines(stmt: str) -> dict[str, str]:
    """Column name -> its definition line, from the lines inside the statement's parentheses."""
    body = CREATE_RE.match(stmt).group(2)
    cols = {}
    for line in body.splitlines():
        line = line.strip().rstrip(",")
        if not line:
            continue
        first = line.split()[0]
        if first.upper() in NOT_COLUMNS:
            continue
        cols[first.strip("`")] = line
    return cols


def primary_key(stmt: str) -> list[str]:
    m = re.search(r"PRIMARY KEY \(([^)]*)\)", stmt)
    assert m, stmt
    return [c.strip().strip("`") for c in m.group(1).split(",")]


def final_primary_key(table: str) -> list[str]:
    """The primary key of the CREATE statement, or of the last ALTER TABLE that replaced it."""
    key = primary_key(create_statements()[table])
    for mig in migrations():
        for stmt in mig.statements:
            if re.match(rf"ALTER TABLE {table}\b", stmt) and "ADD PRIMARY KEY" in stmt:
                key = primary_key(stmt.split("ADD PRIMARY KEY", 1)[1].join(["PRIMARY KEY", ""]))
    return key


# ---------------------------------------------------------------- migrations() and split_statements()


def test_migrations_finds_the_initial_one():
    found = migrations()
    assert found, f"no migrations in {SQL_DIR}"
    first = found[0]
    assert isinstance(first, Migration)
    assert (first.version, first.name) == (1, "initial")
    assert [m.version for m in found] == sorted({m.version for m in found})


def test_initial_migration_statements_are_clean():
    stmts = migrations()[0].statements
    assert len(stmts) == 6
    for stmt in stmts:
        assert stmt == stmt.strip()
        assert not stmt.endswith(";")
        assert "--" not in stmt                          # comment lines dropped
        assert stmt.startswith("CREATE TABLE IF NOT EXISTS "), stmt[:60]
        assert stmt.endswith("ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"), stmt[-60:]


def test_split_statements_drops_comments_and_splits_at_line_end():
    sql = ("-- header; with a semicolon\n"
           "CREATE TABLE a (\n"
           "  x INT  -- trailing comments stay\n"
           ");\n"
           "   -- indented comment;\n"
           "\n"
           "INSERT INTO a VALUES (1); INSERT INTO a VALUES (2);   \n"
           "SELECT 1\n")
    assert split_statements(sql) == [
        "CREATE TABLE a (\n  x INT  -- trailing comments stay\n)",
        "INSERT INTO a VALUES (1); INSERT INTO a VALUES (2)",   # ';' mid-line does not split
        "SELECT 1",
    ]


@pytest.mark.parametrize("sql", ["", "\n\n", "-- only a comment\n", ";\n;\n", "  ;  \n"])
def test_split_statements_of_nothing(sql):
    assert split_statements(sql) == []


def test_split_statements_keeps_a_procedure_whole_between_delimiter_lines():
    sql = ("DROP PROCEDURE IF EXISTS p;\n"
           "DELIMITER //\n"
           "CREATE PROCEDURE p()\n"
           "BEGIN\n"
           "  -- a comment inside\n"
           "  SELECT 1;\n"
           "  SELECT 2;\n"
           "END //\n"
           "DELIMITER ;\n"
           "SELECT 3;\n")
    assert split_statements(sql) == [
        "DROP PROCEDURE IF EXISTS p",
        "CREATE PROCEDURE p()\nBEGIN\n  SELECT 1;\n  SELECT 2;\nEND",
        "SELECT 3",
    ]


def test_split_statements_without_final_semicolon():
    assert split_statements("SELECT 1;\nSELECT 2") == ["SELECT 1", "SELECT 2"]


def test_migrations_in_a_directory(tmp_path):
    assert migrations(tmp_path) == []
    (tmp_path / "001_first.sql").write_text("CREATE TABLE a (x INT);\n")
    (tmp_path / "002_second_one.sql").write_text("-- nothing but\nALTER TABLE a ADD y INT;\nSELECT 1;\n")
    (tmp_path / "notes.txt").write_text("ignored: not .sql")
    assert migrations(tmp_path) == [
        Migration(1, "first", ("CREATE TABLE a (x INT)",)),
        Migration(2, "second_one", ("ALTER TABLE a ADD y INT", "SELECT 1")),
    ]


@pytest.mark.parametrize("names", [["002_b.sql"], ["001_a.sql", "001_b.sql"]])
def test_migration_versions_start_at_1_and_are_unique(tmp_path, names):
    for n in names:
        (tmp_path / n).write_text("SELECT 1;\n")
    with pytest.raises(ValueError, match="start at 1 and be unique"):
        migrations(tmp_path)


def test_migration_versions_may_have_gaps(tmp_path):
    """Migrations are numbered as they are planned and may land in another order: the runner
    applies each version not yet recorded."""
    for n in ("001_a.sql", "003_c.sql"):
        (tmp_path / n).write_text("SELECT 1;\n")
    assert [m.version for m in migrations(tmp_path)] == [1, 3]


@pytest.mark.parametrize("name", ["1_a.sql", "001-a.sql", "001_A.sql", "001_.sql", "abc.sql"])
def test_migration_file_names_are_checked(tmp_path, name):
    (tmp_path / name).write_text("SELECT 1;\n")
    with pytest.raises(ValueError, match="NNN_name.sql"):
        migrations(tmp_path)


# ---------------------------------------------------------------- SQL files agree with delayq.tables


def test_every_core_table_is_created_in_the_sql():
    created = create_statements()
    core = set(tables.metadata.tables)
    assert core <= set(created), f"missing CREATE TABLE IF NOT EXISTS for {sorted(core - set(created))}"
    assert set(created) == core, f"SQL tables without a Core view: {sorted(set(created) - core)}"


def added_columns(table: str) -> list[str]:
    """Columns later migrations add with ALTER TABLE <table> ... ADD COLUMN <name>."""
    found = []
    for mig in migrations():
        for stmt in mig.statements:
            if re.match(rf"ALTER TABLE {table}\b", stmt):
                found += re.findall(r"ADD COLUMN (\w+)", stmt)
    return found


@pytest.mark.parametrize("name", sorted(tables.metadata.tables))
def test_core_columns_match_the_create_statement(name):
    stmt = create_statements()[name]
    sql_cols = list(column_lines(stmt)) + added_columns(name)
    core_cols = [c.name for c in tables.metadata.tables[name].columns]
    missing = [c for c in core_cols if c not in sql_cols]
    assert not missing, f"{name}: columns in delayq.tables but not in the SQL: {missing}"
    assert sorted(sql_cols) == sorted(core_cols), f"{name}: SQL columns without a Core column"


def modified_columns(table: str) -> dict[str, str]:
    """Column definitions later migrations replace with ALTER TABLE <table> MODIFY <name> <definition>."""
    found = {}
    for mig in migrations():
        for stmt in mig.statements:
            if re.match(rf"ALTER TABLE {table}\b", stmt):
                found.update({m.group(1): m.group(0) for m in re.finditer(r"MODIFY (\w+) ([^,]+)", stmt)})
    return found


@pytest.mark.parametrize("name", sorted(tables.metadata.tables))
def test_primary_keys_and_nullability_agree(name):
    stmt = create_statements()[name]
    table = tables.metadata.tables[name]
    assert final_primary_key(name) == [c.name for c in table.primary_key.columns]
    for col_name, line in {**column_lines(stmt), **modified_columns(name)}.items():
        sql_not_null = "NOT NULL" in line.upper()
        assert sql_not_null == (not table.c[col_name].nullable), f"{name}.{col_name}: {line}"


def test_the_column_parser_sees_key_lines_as_keys():
    stmt = create_statements()["job_delay_task"]
    cols = column_lines(stmt)
    assert "task_id" in cols and "updated_ms" in cols
    assert not {"PRIMARY", "KEY", "idx_shard_status_due"} & set(cols)
