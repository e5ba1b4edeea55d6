"""The feature cases make_jinja_cases.py renders: (name, template, context) by area of the language."""

MSGS = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Hi there"},
    {"role": "assistant", "content": "Hello!", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}}]},
    {"role": "tool", "content": "sunny"},
    {"role": "user", "content": "Thanks ✓ 日本"},
]
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather \"now\"",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                         "required": ["city"]}}}]
D = {"b": 1, "a": 2, "C": 3}
PEOPLE = [{"name": "bob", "age": 30, "tags": ["x"]}, {"name": "Alice", "age": 25}, {"name": "carol", "age": 30}]

CASES = []


def case(name, template, context=None):
    CASES.append((name, template, context or {}))


def cases(prefix, templates, context=None):
    for i, t in enumerate(templates):
        case(f"{prefix}_{i:02d}", t, context)


# ---- output and literals ----
cases("print", [
    "{{ none }} {{ None }} {{ true }} {{ True }} {{ false }} {{ False }}",
    "{{ 1 }} {{ -1 }} {{ 1.0 }} {{ -0.0 }} {{ 1.5 }} {{ 1e3 }} {{ 1e16 }} {{ 1e15 }} {{ 1.5e-5 }} {{ 0.0001 }} {{ 123456789.125 }}",
    "{{ 0.1 + 0.2 }} {{ 1 / 3 }} {{ 2 / 3 }} {{ 10 / 4 }} {{ 1e300 * 1e10 }} {{ 3.0 * 1e22 }}",
    "{{ 1_000 }} {{ 1_0.5 }} {{ 12e2 }} {{ 2E-3 }}",
    "{{ [1, 'two', none, true, 3.5] }} {{ [] }} {{ {} }} {{ () }} {{ (1,) }} {{ (1, 2) }}",
    "{{ {'k': 'v', 'n': 1, 'z': none, 'l': [1, (2, 3)]} }}",
    "{{ \"it's\" }} {{ ['it\\'s', \"q\\\"q\", 'a\\\\b', 'tab\\tnl\\n'] }}",
    "{{ ['both \\' and \"', 'ünï', '\\x01', '\\u00e9', '\\u2028'] }}",
    "{{ 'a' 'b' \"c\" }}",
    "{{ x }}|{{ y }}|{{ z }}|{{ w }}",
    "{{ d }} {{ l }}",
    "{{ 'esc \\x41\\u0042\\U00000043 \\101 \\q \\\\' }}",
    "{{ 1, 2 }}",
    "{{ big }} {{ -big }} {{ small }}",
], {"x": "str", "y": 42, "z": 2.5, "w": None, "d": {"a": [1, {"b": None}]}, "l": [True, False, "ü"],
    "big": 9007199254740993, "small": 1e-7})

# ---- whitespace control ----
cases("ws", [
    "a\n{% if true %}\nb\n{% endif %}\nc\n",
    "a\n  {% if true %}\n  b\n  {% endif %}\nc",
    "a  {% if true %}  b  {% endif %}  c",
    "a\n  {%- if true -%}\n  b\n  {%- endif -%}\n  c",
    "a\n  {%+ if true %}\nb\n{% endif +%}\nc",
    "  {{ 'x' }}\n  {{- 'y' -}}  \n  z",
    "a\n  {# comment #}\nb\n  {#- c -#}  \nc",
    "{% for i in [1, 2] %}\n  {{ i }}\n{% endfor %}\n",
    "{% for i in [1, 2] -%}\n  {{ i }}\n{%- endfor %}",
    "x {% raw %}{{ not }} {% if %}{% endraw %} y",
    "x\n  {% raw %}\n  {{ a }}\n  {% endraw %}\ny",
    "x {%- raw -%}  {{ a }}  {%- endraw -%} y",
    "line1\r\nline2\r\n{% if true %}\r\nx\r\n{% endif %}\r\n",
    "trailing newline kept once\n\n",
    "one trailing newline dropped\n",
    "\t{% if true %}\ttab\n\t{% endif %}\n",
    "{% if true %}a{% endif %}\n{% if true %}b{% endif %}\n",
    "{{ 'a' }}\n{{ 'b' }}\n",
    "{%- set x = 1 -%}\n\n\n   {{ x }}   \n\n",
    "a {#- x #} b {# y -#} c",
    "{{ {'a': {'b': 1}} }}",
    "{{ {'a': {'b': 1}}['a'] }}",
    "<{%- if true %} x {% endif -%}>",
    "   {% if true %}x{% endif %}   {% if true %}y{% endif %}",
])

# ---- if / elif / else ----
cases("if", [
    "{% if x %}yes{% else %}no{% endif %}",
    "{% if x > 5 %}big{% elif x > 2 %}mid{% elif x > 0 %}small{% else %}none{% endif %}",
    "{% if not x %}falsy{% endif %}{% if x is defined %}def{% endif %}",
    "{% if [] %}a{% elif {} %}b{% elif '' %}c{% elif 0 %}d{% elif 0.0 %}e{% elif none %}f{% else %}g{% endif %}",
    "{% if [0] and {'a': 0} and ' ' and -1 %}truthy{% endif %}",
    "{{ 'a' if x else 'b' }} {{ 'c' if not x }}|{{ 'd' if x > 1 else 'e' if x > 0 else 'f' }}",
    "{{ x and 'and' }} {{ x or 'or' }} {{ 0 or '' }}|{{ '' and 1 }}|{{ none or [] }}",
    "{% if undefined_thing %}x{% else %}undefined is falsy{% endif %}",
], {"x": 3})

# ---- for loops ----
cases("for", [
    "{% for x in xs %}{{ x }},{% endfor %}",
    "{% for x in xs %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.revindex }}/{{ loop.revindex0 }}/{{ loop.first }}/{{ loop.last }}/{{ loop.length }} {% endfor %}",
    "{% for x in xs %}{{ loop.previtem | default('-') }}<{{ x }}>{{ loop.nextitem | default('-') }} {% endfor %}",
    "{% for x in xs %}{{ loop.cycle('odd', 'even') }} {% endfor %}",
    "{% for x in xs if x is odd %}{{ x }}:{{ loop.index }}/{{ loop.length }} {% endfor %}",
    "{% for x in [] %}never{% else %}empty{% endfor %}",
    "{% for x in xs if x > 10 %}never{% else %}none matched{% endfor %}",
    "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}",
    "{% for k in d %}{{ k }}{% endfor %} {% for c in 'héllo' %}[{{ c }}]{% endfor %}",
    "{% for a, b in [(1, 2), [3, 4], 'xy'] %}{{ a }}{{ b }} {% endfor %}",
    "{% for (a, b), c in [((1, 2), 3)] %}{{ a }}{{ b }}{{ c }}{% endfor %}",
    "{% for x in xs %}{% if x == 3 %}{% break %}{% endif %}{{ x }}{% endfor %}",
    "{% for x in xs %}{% if x is even %}{% continue %}{% endif %}{{ x }}{% endfor %}",
    "{% for x in xs %}{% continue %}{% else %}else-after-continue{% endfor %}",
    "{% for x in xs %}{% break %}{% else %}else-after-break{% endfor %}",
    "{% for x in xs %}{% if x > 1 %}{% break %}{% endif %}{% else %}else{% endfor %}",
    "{% for x in [1, 2] %}{% for y in 'ab' %}{{ loop.index }}{{ x }}{{ y }} {% endfor %}{{ loop.index }}|{% endfor %}",
    "{% for i in range(3) %}{{ i }}{% endfor %} {% for i in range(2, 8, 2) %}{{ i }}{% endfor %} {% for i in range(5, 0, -2) %}{{ i }}{% endfor %}",
    "{{ range(0) | list }} {{ range(3, 1) | list }} {{ range(-2, 2) | list }}",
    "{% for x in none_value %}x{% endfor %}",
    "{% for x in undefined_value %}x{% else %}undefined iterates as empty{% endfor %}",
    "{% for x in 5 %}x{% endfor %}",
    "{% for m in messages %}{{ m.role }}{% if not loop.last %}, {% endif %}{% endfor %}",
    "{% for x in xs %}{% set y = x * 2 %}{{ y }}{% endfor %}[{{ y }}]",
    "{% set x = 0 %}{% for i in range(3) %}{{ x }}{% set x = x + 1 %}{{ x }};{% endfor %}{{ x }}",
    "{% for x in xs %}{{ loop.depth }}{{ loop.depth0 }}{% endfor %}",
    "{% for x in xs %}{% endfor %}{{ loop is defined }}{{ x is defined }}",
    "{% for i in range(100001) %}{% endfor %}",
    "{% for x in d.values() %}{{ x }}{% endfor %}{% for k in d.keys() %}{{ k }}{% endfor %}",
    "{% for x in xs|reverse %}{{ x }}{% endfor %} {% for x in xs[::-1] %}{{ x }}{% endfor %}",
], {"xs": [1, 2, 3, 4, 5], "d": D, "messages": MSGS, "none_value": None})

# ---- set, namespace, with ----
cases("set", [
    "{% set a = 1 %}{% set b, c = 2, 3 %}{{ a }}{{ b }}{{ c }}",
    "{% set a, b = [1, 2] %}{{ a + b }}",
    "{% set t = 1, 2 %}{{ t }}",
    "{% set x %}block {{ 1 + 1 }}{% endset %}[{{ x }}]",
    "{% set x | upper %}shout {{ 'it' }}{% endset %}{{ x }}",
    "{% set x | trim | replace('a', 'b') %}  banana  {% endset %}[{{ x }}]",
    "{% set ns = namespace(count=0, items=[]) %}{% for i in range(4) %}{% set ns.count = ns.count + i %}{% set ns.items = ns.items + [i] %}{% endfor %}{{ ns.count }} {{ ns.items }}",
    "{% set ns = namespace() %}{% set ns.a = 'x' %}{{ ns.a }}{{ ns.b is defined }}",
    "{% set ns = namespace({'a': 1}, b=2) %}{{ ns.a }}{{ ns.b }}",
    "{% set ns = namespace(a=1) %}{{ ns }}",
    "{% set x = 1 %}{% set x.y = 2 %}",
    "{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}{{ a is defined }}",
    "{% if true %}{% set inner = 'leaks' %}{% endif %}{{ inner }}",
    "{% set add_generation_prompt = add_generation_prompt if add_generation_prompt is defined else false %}{{ add_generation_prompt }}",
    "{% set ns = namespace(flag=false) %}{% for m in messages %}{% if m.role == 'tool' %}{% set ns.flag = true %}{% endif %}{% endfor %}{{ ns.flag }}",
    "{% set x = [1, 2] %}{% set y = x %}{{ x is sameas y }} {{ [1] is sameas [1] }}",
], {"messages": MSGS})

# ---- macros and call blocks ----
cases("macro", [
    "{% macro f(a, b=2) %}{{ a }}-{{ b }}{% endmacro %}{{ f(1) }} {{ f(1, 3) }} {{ f(b=5, a=4) }}",
    "{% macro f(a) %}[{{ a }}]{% endmacro %}{{ f() }}",
    "{% macro f() %}{{ varargs }}{{ kwargs }}{% endmacro %}{{ f(1, 2, x=3) }}",
    "{% macro f(a) %}{{ a }}{% endmacro %}{{ f(1, 2) }}",
    "{% macro f(a) %}{{ a }}{% endmacro %}{{ f(1, b=2) }}",
    "{% macro f(a, b=a * 2) %}{{ b }}{% endmacro %}{{ f(3) }}",
    "{% macro rec(n) %}{{ n }}{% if n > 0 %}{{ rec(n - 1) }}{% endif %}{% endmacro %}{{ rec(5) }}",
    "{% macro wrap() %}<{{ caller() }}>{% endmacro %}{% call wrap() %}inside{% endcall %}",
    "{% macro each(xs) %}{% for x in xs %}{{ caller(x) }}{% endfor %}{% endmacro %}{% call(item) each([1, 2]) %}({{ item }}){% endcall %}",
    "{% macro f() %}{% set local = 1 %}{{ local }}{% endmacro %}{{ f() }}{{ local is defined }}",
    "{% set g = 'global' %}{% macro f() %}{{ g }}{% endmacro %}{{ f() }}",
    "{% macro f(x) %}{{ x | upper }}{% endmacro %}{{ f('a') ~ f('b') }} {{ f('c') | length }}",
    "{% macro render_schema(s, depth=0) %}{% if s.type == 'object' %}{% for k, v in s.properties.items() %}{{ '  ' * depth }}{{ k }}:{{ render_schema(v, depth + 1) }}{% endfor %}{% else %}{{ s.type }}\n{% endif %}{% endmacro %}{{ render_schema(tools[0].function.parameters) }}",
    "{% macro f() %}x{% endmacro %}{{ f }}",
    "{% macro inf() %}{{ inf() }}{% endmacro %}{{ inf() }}",
], {"tools": TOOLS})

# ---- filter blocks, generation ----
cases("blocks", [
    "{% filter upper %}hello {{ 'world' }}{% endfilter %}",
    "{% filter indent(2, true) %}a\nb{% endfilter %}",
    "{% filter replace('a', 'o') | upper %}banana{% endfilter %}",
    "{% generation %}gen {{ 1 }}{% endgeneration %}!",
    "{% for m in messages %}{% if m.role == 'assistant' %}{% generation %}{{ m.content }}{% endgeneration %}{% endif %}{% endfor %}",
], {"messages": MSGS})

# ---- expressions: arithmetic, comparison, membership ----
cases("expr", [
    "{{ 7 + 3 }} {{ 7 - 10 }} {{ 6 * 7 }} {{ 7 / 2 }} {{ 8 / 4 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 % -3 }}",
    "{{ 2 ** 10 }} {{ 2 ** -1 }} {{ 2.0 ** 3 }} {{ -2 ** 2 }} {{ 2 ** 3 ** 2 }} {{ (2 ** 3) ** 2 }}",
    "{{ 7.5 // 2 }} {{ -7.5 // 2 }} {{ 7.5 % 2 }} {{ -7.5 % 2 }} {{ 1 + 2.5 }} {{ true + 1 }} {{ true * 2.5 }}",
    "{{ 1 + 2 * 3 - 4 / 2 }} {{ (1 + 2) * 3 }} {{ 10 - 2 - 3 }} {{ 2 * 3 % 4 }}",
    "{{ 'ab' * 3 }} {{ 3 * 'ab' }} {{ 'ab' * 0 }}|{{ 'ab' * -1 }}|{{ [1, 2] * 2 }} {{ [0] * 0 }}",
    "{{ [1] + [2, 3] }} {{ (1,) + (2,) }} {{ 'a' + 'b' }}",
    "{{ 1 ~ 2 ~ 'x' }} {{ none ~ true ~ [1] }} {{ undefined_var ~ 'x' }} {{ 1.0 ~ '' }}",
    "{{ 1 < 2 }} {{ 2 <= 1 }} {{ 'a' != 'b' }} {{ 3 > 2 > 1 }} {{ 1 < 3 > 2 }} {{ 1 == 1.0 }} {{ true == 1 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }}",
    "{{ 'x' in 'xyz' }} {{ 'q' not in 'xyz' }} {{ 1 in [1, 2] }} {{ 'a' in {'a': 1} }} {{ 1 in {'a': 1} }} {{ (1, 2) in [(1, 2)] }}",
    "{{ none is none }} {{ 1 is not none }} {{ not 1 is none }} {{ not (1 is none) }} {{ not true == false }}",
    "{{ -x }} {{ +x }} {{ - -x }} {{ not not x }} {{ -x | abs }} {{ -(x | abs) }}",
    "{{ 1 / 0 }}",
    "{{ 1 // 0 }}",
    "{{ 1 % 0 }}",
    "{{ 1.5 // 0 }}",
    "{{ 'a' + 1 }}",
    "{{ 1 + 'a' }}",
    "{{ [1] + (2,) }}",
    "{{ 'a' < 1 }}",
    "{{ 1 in 'abc' }}",
    "{{ 'a' in 3 }}",
    "{{ undefined_var + 1 }}",
    "{{ undefined_var < 1 }}",
    "{{ undefined_var == none }} {{ undefined_var != 1 }} {{ 'a' in undefined_var }}",
    "{{ - 'a' }}",
    "{{ 9223372036854775807 + 0 }} {{ -9223372036854775807 - 1 }}",
    "{{ 0.1 * 3 }} {{ 1e-7 }} {{ 100.0 }} {{ 1e22 }} {{ 12345678901234567890.0 }}",
    "{{ 1 if 0 else 2 if '' else 3 }}",
    "{{ (1, 2) == [1, 2] }} {{ {'a': 1, 'b': 2} == {'b': 2, 'a': 1} }} {{ [1, [2]] == [1, [2]] }}",
    "{{ x.y.z }}",
    "{{ x() }}",
    "{{ undefined_function() }}",
    "{{ none.attr }}|{{ none.attr is defined }}",
    "{{ 3 is sameas 3 }} {{ none is sameas none }} {{ true is sameas 1 }}",
], {"x": 5})

# ---- attribute, subscript, slicing ----
cases("access", [
    "{{ d.a }} {{ d['a'] }} {{ d.missing }}|{{ d['missing'] }}|{{ d.missing is defined }}",
    "{{ m.role }} {{ m['content'] }} {{ m.tool_calls[0].function.name }} {{ m.tool_calls[0]['function']['arguments']['city'] }}",
    "{{ xs[0] }} {{ xs[-1] }} {{ xs[10] }}|{{ xs[10] is defined }} {{ xs.0 }} {{ xs.1 }}",
    "{{ s[0] }} {{ s[-1] }} {{ s[1:3] }} {{ s[::-1] }} {{ s[::2] }} {{ s[-3:] }} {{ s[:-3] }} {{ s[5:1] }}|{{ s[100:] }}|",
    "{{ xs[1:3] }} {{ xs[::-1] }} {{ xs[::2] }} {{ xs[-2:] }} {{ xs[:] }} {{ xs[3:0:-1] }} {{ xs[-1:-4:-1] }} {{ xs[10:] }}",
    "{{ t[0] }} {{ t[1:] }} {{ t[::-1] }}",
    "{{ u[0] }}{{ u[1] }}{{ u[-1] }} {{ u[1:3] }} {{ u | length }} {{ u[::-1] }}",
    "{{ xs[::0] }}",
    "{{ d.items is defined }} {{ d.items is callable }}",
    "{{ d['items'] is defined }} {{ dk.items is callable }}|{{ dk['items'] }}|{{ dk.keys is defined }}",
    "{{ xs['a'] }}|{{ s.missing }}|{{ 5.attr }}|",
    "{{ xs[1.5] }}",
    "{{ undefined_var.attr }}",
    "{{ undefined_var['x'] }}",
    "{{ undefined_var[0] }}",
    "{{ d[none] }}|{{ {none: 1}[none] }} {{ {1: 'int', 'a': 'str'}[1] }} {{ {1: 'x'}[1.0] }} {{ {(1, 2): 't'}[(1, 2)] }}",
    "{{ xs[true] }} {{ s[false] }}",
    "{{ m.content.upper() }} {{ m['content']['upper']() }}",
    "{{ d.get('a') }} {{ d.get('zz') }} {{ d.get('zz', 'dflt') }} {{ d.get('zz') is none }}",
    "{{ d.keys() | list }} {{ d.values() | list }} {{ d.items() | list }}",
    "{{ d.copy() }}",
], {"d": {"a": 1, "b": [2, 3]}, "m": MSGS[2], "xs": [10, 20, 30, 40], "s": "abcdef", "t": [1, 2, 3],
    "u": "héllo", "dk": {"items": "own key", "x": 1}})

# ---- the immutable sandbox ----
cases("sandbox", [
    "{{ xs.append(4) }}",
    "{{ xs.append }}|{{ xs.append is defined }}",
    "{{ d.update({'b': 2}) }}",
    "{{ d.pop('a') }}",
    "{{ xs.pop() }}",
    "{{ xs.index(2) }} {{ xs.count(2) }}",
    "{{ d.__class__ }}",
    "{{ range(100001) | length }}",
    "{{ ''.__class__ }}|",
], {"xs": [1, 2, 2, 3], "d": {"a": 1}})

# ---- string methods ----
cases("str", [
    "{{ s.strip() }}|{{ s.lstrip() }}|{{ s.rstrip() }}|{{ s.strip(' .') }}|{{ 'xxhixx'.strip('x') }}|{{ 'ab'.strip('') }}",
    "{{ 'a,b,,c'.split(',') }} {{ '  a  b '.split() }} {{ 'a b c d'.split(' ', 2) }} {{ 'a b c'.split(none, 1) }} {{ ''.split() }} {{ ''.split(',') }}",
    "{{ 'a\\nb\\r\\nc\\n'.splitlines() }}",
    "{{ s.startswith('  he') }} {{ 'abc'.startswith(('x', 'a')) }} {{ 'abc'.endswith('bc') }} {{ 'abc'.endswith(('x', 'y')) }}",
    "{{ 'aaa'.replace('a', 'b') }} {{ 'aaa'.replace('a', 'b', 2) }} {{ 'ab'.replace('', '-') }}",
    "{{ 'Hello Wörld'.upper() }} {{ 'Hello Wörld'.lower() }} {{ \"hello wORLD they're\".title() }} {{ 'hELLO'.capitalize() }}",
    "{{ 'hello'.find('l') }} {{ 'hello'.find('z') }} {{ 'héllo'.find('l') }} {{ 'hello'.count('l') }} {{ 'hello'.rfind('l') }} {{ 'hello'.index('e') }}",
    "{{ ', '.join(['a', 'b']) }} {{ ''.join('abc') }}",
    "{{ '{} and {}'.format('a', 'b') }} {{ '{1}{0}'.format('a', 'b') }} {{ '{x}!'.format(x=1) }} {{ '{{}}'.format() }}",
    "{{ '%s=%d' % ('a', 3) }} {{ '%5.2f|%-4s|%04d' % (3.14159, 'ab', 42) }} {{ '%s' % 'solo' }} {{ '%r' % 'q' }} {{ '100%%' % () }} {{ '%(a)s-%(b)s' % {'a': 1, 'b': 2} }}",
    "{{ '%x %X %o %e %g %i' % (255, 255, 8, 12345.678, 0.0001, 7) }}",
    "{{ '%d' % 'x' }}",
    "{{ '%s %s' % ('a',) }}",
    "{{ 'ab'.center(6, '*') }} {{ 'ab'.center(7) }}| {{ 'ab'.ljust(4, '.') }} {{ 'ab'.rjust(4) }}",
    "{{ '123'.isdigit() }} {{ 'abc'.isalpha() }} {{ ' '.isspace() }} {{ 'ABC'.isupper() }} {{ 'abc'.islower() }} {{ 'a1'.isalnum() }} {{ ''.isdigit() }}",
    "{{ 'prefix-body'.removeprefix('prefix-') }} {{ 'body.txt'.removesuffix('.txt') }}",
    "{{ s.nonexistent }}|{{ s.nonexistent is defined }}",
    "{{ s.nonexistent() }}",
    "{{ 'abc'.startswith(1) }}",
    "{{ 'a'.split('') }}",
    "{{ '\\u00a0x\\u3000'.strip() | length }} {{ 'x\\x0by'.split() }}",
], {"s": "  hello world. "})

# ---- filters ----
cases("filter", [
    "{{ xs | length }} {{ s | length }} {{ d | length }} {{ u | length }} {{ undefined_var | length }} {{ xs | count }}",
    "{{ xs | first }} {{ xs | last }} {{ s | first }} {{ s | last }} {{ [] | first }}|{{ [] | last is defined }}",
    "{{ xs | join }} {{ xs | join(', ') }} {{ people | join(', ', attribute='name') }} {{ s | join('-') }}",
    "{{ undefined_var | default('dflt') }} {{ none | default('dflt') }} {{ '' | default('dflt', true) }} {{ 0 | d('zero', boolean=true) }} {{ xs | default }}",
    "{{ s | upper }} {{ 'ÄB' | lower }} {{ 'hello wORLD-foo(bar) [baz]' | title }} {{ 'hELLO wORLD' | capitalize }}",
    "{{ '  a b  ' | trim }}|{{ 'xxaxx' | trim('x') }}|{{ 5 | trim }}",
    "{{ 'aXbXc' | replace('X', '-') }} {{ 'aXbXc' | replace('X', '-', 1) }} {{ 12 | replace('1', 'one') }}",
    "{{ 5 | string }} {{ none | string }} {{ [1, 'a'] | string }} {{ (5 | string) ~ '!' }} {{ undefined_var | string }}|",
    "{{ '42' | int }} {{ ' 42 ' | int }} {{ '3.7' | int }} {{ 'x' | int }} {{ 'x' | int(-1) }} {{ 3.9 | int }} {{ -3.9 | int }} {{ true | int }} {{ none | int }} {{ '0x1A' | int(0, 16) }} {{ '1A' | int(base=16) }} {{ '1_000' | int }}",
    "{{ '3.5' | float }} {{ 'x' | float }} {{ 2 | float }} {{ '1e3' | float }} {{ ' 2.5 ' | float }} {{ 'x' | float(1.5) }}",
    "{{ s | list }} {{ d | list }} {{ xs | list }} {{ (1, 2) | list }}",
    "{{ d | items | list }} {{ undefined_var | items | list }}",
    "{{ d | dictsort }} {{ d | dictsort(reverse=true) }} {{ d | dictsort(by='value') }} {{ d | dictsort(true) }} {{ mixed | dictsort }}",
    "{{ people | map(attribute='name') | list }} {{ people | map(attribute='missing', default='?') | list }} {{ xs | map('string') | list }} {{ ['a', 'B'] | map('upper') | list }} {{ xs | map('round', 1) | list }}",
    "{{ people | map(attribute='tags.0') | list }}",
    "{{ xs | select('odd') | list }} {{ xs | reject('odd') | list }} {{ [0, 1, '', 'a', none] | select | list }} {{ [0, 1, '', 'a', none] | reject | list }} {{ xs | select('divisibleby', 2) | list }} {{ xs | select('>', 2) | list }} {{ xs | select('in', [1, 3]) | list }}",
    "{{ people | selectattr('age', 'equalto', 30) | map(attribute='name') | list }} {{ people | rejectattr('tags') | map(attribute='name') | list }} {{ people | selectattr('tags', 'defined') | list | length }} {{ people | selectattr('age', 'gt', 26) | list | length }}",
    "{{ ['a', 'A', 'b', 'a'] | unique | list }} {{ ['a', 'A', 'b'] | unique(case_sensitive=true) | list }} {{ people | unique(attribute='age') | map(attribute='name') | list }}",
    "{{ 'a\\nb\\n\\nc' | indent }}|{{ 'a\\nb\\n\\nc' | indent(2, true) }}|{{ 'a\\nb\\n\\nc' | indent(2, blank=true) }}|{{ 'a\\nb' | indent('> ', first=true) }}|{{ '' | indent(first=true) }}|",
    "{{ 2.675 | round(2) }} {{ 2.5 | round }} {{ 3.5 | round }} {{ -2.5 | round }} {{ 7.1 | round(0, 'floor') }} {{ 7.1 | round(0, 'ceil') }} {{ 7 | round }} {{ 1234.5 | round(-2) }} {{ 0.125 | round(2) }}",
    "{{ -3 | abs }} {{ -3.5 | abs }} {{ xs | sum }} {{ people | sum(attribute='age') }} {{ [0.5, 1] | sum }} {{ xs | sum(start=10) }}",
    "{{ xs | min }} {{ xs | max }} {{ ['b', 'A', 'c'] | min }} {{ ['b', 'A', 'c'] | max(case_sensitive=true) }} {{ people | max(attribute='age') }} {{ [] | max }}|",
    "{{ xs | batch(2) | list }} {{ xs | batch(3, 'x') | list }}",
    "{{ '<a href=\"x\">&\\'</a>' | e }} {{ '<b>' | escape }} {{ '<i>' | safe }} {{ 5 | e }}",
    "{{ 'one two  three, four' | wordcount }} {{ '' | wordcount }}",
    "{{ xs | reverse | list }} {{ s | reverse }} {{ (1, 2) | reverse | list }}",
    "{{ [3, 1, 2] | sort }} {{ [3, 1, 2] | sort(reverse=true) }} {{ ['b', 'A', 'c'] | sort }} {{ ['b', 'A', 'c'] | sort(case_sensitive=true) }} {{ people | sort(attribute='age') | map(attribute='name') | list }} {{ people | sort(attribute='name') | map(attribute='name') | list }}",
    "{{ 'ab' | center(6) }}| {{ 'abc' | center(2) }}|",
    "{{ people[0] | attr('name') }}",
    "{{ 'a long sentence to cut here' | truncate(15) }} {{ 'short' | truncate(15) }} {{ 'abcdefghijklmnopqrstuvwxyz' | truncate(10, true) }} {{ 'abcdefghij klmnop' | truncate(12, false, '~', 0) }}",
    "{{ '%s-%s' | format('a', 2) }}",
    "{{ xs | unknown_filter }}",
    "{{ xs | select('odd') is string }}",
    "{{ xs | select('odd') | length }}",
    "{% if xs | select('gt', 100) %}generator is truthy{% endif %} {% if xs | select('gt', 100) | list %}x{% else %}empty list{% endif %}",
    "{{ (xs | map('string') | join('+')) }} {{ xs | map('string') | first }}",
    "{{ xs | reverse | last }}",
    "{{ xs | map(attribute='x') | list }}",
    "{{ 'x' | length(1) }}",
    "{{ 5 | length }}",
    "{{ xs | join(attribute='missing') }}|",
    "{{ none | list }}",
    "{{ d | sort }} {{ d | sum }}",
    "{{ xs | tojson | length }} {{ xs | tojson | list | first }}",
], {"xs": [1, 2, 3, 4], "s": "héllo", "u": "日本語", "d": D, "people": PEOPLE,
    "mixed": {"b": 1, "a": 2, "B": 0}})

# ---- tojson ----
cases("tojson", [
    "{{ tools | tojson }}",
    "{{ tools | tojson(indent=2) }}",
    "{{ tools[0].function.parameters | tojson(indent=4, sort_keys=true) }}",
    "{{ d | tojson(separators=(',', ':')) }} {{ d | tojson(separators=[';', '=']) }}",
    "{{ {'u': 'ünï ✓ 日本', 'q': 'a\"b\\\\c', 'c': '\\n\\t\\x01\\x7f', 'e': [], 'o': {}} | tojson }}",
    "{{ {'e': [], 'o': {}, 'l': [1, [2, []]]} | tojson(indent=2) }}",
    "{{ [1.0, 1.5, 1e20, 1e-5, -0.0, true, none, 9007199254740993] | tojson }}",
    "{{ 'string' | tojson }} {{ 5 | tojson }} {{ none | tojson }} {{ (1, 2) | tojson }}",
    "{{ {1: 'a', none: 'b', true: 'c', 2.5: 'd'} | tojson }}",
    "{{ undefined_var | tojson }}",
    "{{ d | tojson(indent='\\t') }}",
    "{{ d | tojson(indent=0) }}",
    "{{ d | tojson(sort_keys=true) }}",
    "{{ messages | tojson }}",
    "{{ d | tojson(ensure_ascii=false) }}",
    "{{ {'u': 'ünï ✓ 日本 😀', 'c': '\\x7f\\x01\\n\"'} | tojson(ensure_ascii=true) }} {{ ['é'] | tojson(true, 1) }}",
], {"tools": TOOLS, "d": D, "messages": MSGS})

# ---- tests ----
cases("test", [
    "{{ x is defined }} {{ y is defined }} {{ y is undefined }} {{ none is none }} {{ 0 is none }}",
    "{{ 1 is number }} {{ 1.5 is number }} {{ true is number }} {{ '1' is number }} {{ 1 is integer }} {{ true is integer }} {{ 1.0 is integer }} {{ 1.0 is float }} {{ 1 is float }}",
    "{{ true is boolean }} {{ 1 is boolean }} {{ true is true }} {{ 1 is true }} {{ false is false }} {{ 0 is false }} {{ none is false }}",
    "{{ 's' is string }} {{ 1 is string }} {{ {} is mapping }} {{ [] is mapping }} {{ [] is sequence }} {{ 's' is sequence }} {{ {} is sequence }} {{ 1 is sequence }} {{ y is sequence }}",
    "{{ [] is iterable }} {{ 's' is iterable }} {{ {} is iterable }} {{ 1 is iterable }} {{ y is iterable }} {{ none is iterable }}",
    "{{ 2 is even }} {{ 3 is odd }} {{ 9 is divisibleby 3 }} {{ 9 is divisibleby(4) }} {{ 2.0 is even }}",
    "{{ 1 is in [1, 2] }} {{ 'a' is in 'abc' }} {{ 1 is eq 1 }} {{ 1 is equalto 2 }} {{ 1 is == 1 }} {{ 1 is ne 2 }} {{ 1 is != 1 }}",
    "{{ 1 is lt 2 }} {{ 1 is lessthan 2 }} {{ 1 is < 2 }} {{ 2 is gt 1 }} {{ 2 is greaterthan 3 }} {{ 2 is > 1 }} {{ 1 is le 1 }} {{ 1 is <= 0 }} {{ 1 is ge 1 }} {{ 1 is >= 2 }}",
    "{{ range is callable }} {{ 1 is callable }} {{ raise_exception is callable }} {{ 'upper' is filter }} {{ 'odd' is test }} {{ 'nope' is filter }}",
    "{{ 'abc' is lower }} {{ 'ABC' is upper }} {{ 'aBc' is lower }} {{ 'x' is escaped }}",
    "{{ x is not defined }} {{ x is not string }} {{ not x is string }}",
    "{{ 1 is sameas 1 }} {{ 1 is sameas true }} {{ none is sameas none }} {{ false is sameas false }}",
    "{{ y is even }}",
    "{{ x is nonexistenttest }}",
    "{{ 'a' is in 1 }}",
    "{{ xs is sequence }} {{ (xs | select('odd')) is sequence }} {{ (xs | select('odd')) is iterable }}",
    "{{ ns is defined }} {{ (1, 2) is sequence }}",
], {"x": "str", "xs": [1, 2, 3]})

# ---- globals ----
cases("global", [
    "{{ raise_exception('custom message: ' ~ 1) }}",
    "before{% if true %}{{ raise_exception('inside if') }}{% endif %}",
    "{{ raise_exception() }}",
    "{{ strftime_now('%Y') | length }} {{ strftime_now('') }}|",
    "{{ range(3) | list }} {{ range(3) | length }} {{ 2 in range(3) }}",
    "{{ range(1, 2, 0) }}",
    "{{ dict(a=1, b='x') }} {{ dict({'z': 1}, y=2) }} {{ dict() }}",
    "{{ namespace is callable }}",
    "{{ range('a') }}",
])

# ---- context: special tokens, messages, tools, add_generation_prompt, kwargs ----
CHAT_CONTEXT = {"messages": MSGS, "tools": TOOLS, "add_generation_prompt": True, "bos_token": "<s>",
                "eos_token": "</s>", "enable_thinking": False, "documents": None}
cases("chat", [
    "{{ bos_token }}{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{{ eos_token }}{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}",
    "{% if tools %}{% for t in tools %}{{ t.function.name }}: {{ t.function.description }} {{ t | tojson }}\n{% endfor %}{% endif %}",
    "{% for m in messages %}{% if m.tool_calls is defined %}{% for tc in m.tool_calls %}{{ tc.function.name }}({{ tc.function.arguments | tojson }}){% endfor %}{% endif %}{% endfor %}",
    "{% if enable_thinking is defined and enable_thinking is false %}no-think{% endif %} {{ documents }} {{ unk_token is defined }}",
    "{%- set system = messages[0].content if messages[0].role == 'system' else '' -%}\n{{- system -}}\n{%- for m in messages[1:] %}\n[{{ m.role | upper }}] {{ m.content | trim }}\n{%- endfor %}",
    "{% for m in messages %}{% if m.role not in ['system', 'user', 'assistant', 'tool'] %}{{ raise_exception('bad role ' + m.role) }}{% endif %}{% endfor %}ok",
    "{% for m in messages %}{% if (m.role == 'user') != (loop.index0 % 2 == 1) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% endfor %}",
    "{{ messages | selectattr('role', 'equalto', 'user') | map(attribute='content') | join(' / ') }}",
    "{{ (messages | last).content }} {{ messages[-1]['content'][-2:] }}",
    "{% set last_user = namespace(i=-1) %}{% for m in messages %}{% if m.role == 'user' %}{% set last_user.i = loop.index0 %}{% endif %}{% endfor %}{{ last_user.i }}",
    "{% for m in messages[::-1] %}{{ m.role[0] }}{% endfor %}",
    "{{ messages[2].tool_calls[0].function.arguments.city }} {{ messages[2].tool_calls[0].function.arguments | dictsort | first }}",
], CHAT_CONTEXT)

# ---- syntax errors (with their lines) ----
cases("syntax", [
    "{% if x %}\nno end",
    "line1\n{% for x in y %}\n{% endif %}",
    "{{ x + }}",
    "{{ 'unterminated }}",
    "a\nb\n{% endfor %}",
    "{% if %}{% endif %}",
    "{{ x | }}",
    "{% set %}",
    "{{ (1, 2 }}",
    "{{ [1, 2) }}",
    "{% unknowntag %}",
    "{# unterminated comment",
    "{% raw %}unterminated raw",
    "{{ x }",
    "{% macro f(a=1, b) %}{% endmacro %}",
    "\n\n{% else %}",
    "{% break %}",
    "{% for x in y %}{% endfor %}{% continue %}",
    "{{ x is }}",
    "{{ 1 is odd is odd }}",
    "{% for x in y %}{% else %}{% else %}{% endfor %}",
    "{{ f(a=1, 2) }}",
    "{% set x = 1 %}\n{% set y = %}",
    "{{ x.1a }}",
    "{% elif x %}",
    "{{ @ }}",
])
